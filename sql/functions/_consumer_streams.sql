-- pglogq._consumer_streams(q, lanes): the stream rows a consumer of queue q has, as stream numbers.
-- Parameters: q  the queue row; lanes  the consumer is a share consumer subscribed with lanes
-- Returns:    setof smallint: -1 the urgent lane (a queue with one), 0..partitions-1 a partition's
--             stream (a partitioned queue), -2..-9 the lanes of a share consumer subscribed
--             with lanes, on a queue with one partition; none otherwise.
-- Raises:     nothing.
-- Tables:     none.
-- The one owner of which streams a consumer has (subscribe makes them, a layout change makes them
-- anew).  Lanes: a share consumer subscribed with them cuts its leases on eight lanes, lane k (stream
-- -2 - k) holding the events with ev_id % 8 = k (ordinary ones only on a queue with an urgent
-- lane), each with its own cursor and batch, so that workers cut leases side by side, each under
-- the lock of the lane it took (SKIP LOCKED), where one frontier made every acquisition of the
-- consumer wait for the one before it to commit (see docs/decisions/share-consumers.md).  Ids
-- come from one sequence, so the lanes share the events evenly.  The rule "lane k holds
-- ev_id % 8 = k" is read inline where a call per row would cost the hot path (_batch_page,
-- receive, and the readers of a holder's events; tests/sql/test_rule_owners.py pins them).
-- Without lanes a share consumer hands its events out in one order from one frontier (its own
-- row), one acquisition at a time.  A partitioned queue has no lanes: its partitions are the
-- units a share consumer's workers take side by side already.
CREATE OR REPLACE FUNCTION pglogq._consumer_streams(q pglogq.queue, lanes boolean)
RETURNS SETOF smallint LANGUAGE sql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
    SELECT -1::smallint WHERE q.urgent_lane
    UNION ALL
    SELECT p::smallint FROM generate_series(0, q.partitions - 1) p WHERE q.partitions > 1
    UNION ALL
    SELECT (-2 - k)::smallint FROM generate_series(0, 7) k WHERE coalesce(lanes, false) AND q.partitions <= 1;
$$;
