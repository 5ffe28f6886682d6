-- pglogq.ticker_check(save): refuse a database restored into a cluster whose txids are behind.
-- Parameters: save  record this cluster's system id and the current txid in ticker_state
--             (the ticker daemon saves at start and about once a minute; false only checks)
-- Returns:    one row: system_id (this cluster), previous_system_id (recorded before, NULL on
--             the first run), current_txid (next txid to be assigned), max_txid_seen (the highest
--             txid recorded or found in the latest tick of any queue), status: 'first run',
--             'ok', or 'new cluster' (another cluster, but its txids are ahead: safe).
-- Raises:     PQ040 the current txid is older than one already seen by this database (restored
--             into another cluster, or txids otherwise went backwards); nothing is recorded.
-- Tables:     ticker_state (read; update when save), tick_head (read).
-- Ticks compare pg_snapshot txids; a snapshot taken in a cluster whose counter is behind the one
-- the ticks came from would batch events wrongly (empty batches, then duplicates).  _tick also
-- refuses (PQ015) per queue; this check runs before the first tick and covers queues without ticks.
CREATE OR REPLACE FUNCTION pglogq.ticker_check(save boolean DEFAULT true)
RETURNS TABLE (system_id numeric, previous_system_id numeric, current_txid xid8,
               max_txid_seen xid8, status text)
LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    st pglogq.ticker_state;
    tick_max xid8;
BEGIN
    IF save IS NULL THEN
        RAISE EXCEPTION 'ticker_check: save must not be NULL' USING ERRCODE = 'PQ019';
    END IF;
    IF save THEN
        SELECT * INTO st FROM pglogq.ticker_state s WHERE s.singleton FOR UPDATE;
    ELSE
        SELECT * INTO st FROM pglogq.ticker_state s WHERE s.singleton;
    END IF;
    system_id := (SELECT c.system_identifier FROM pg_control_system() c)::numeric;
    previous_system_id := st.system_id;
    current_txid := pg_snapshot_xmax(pg_current_snapshot());
    -- each queue's latest tick, from its row of tick_head: a read of the tick table per queue
    -- planned every queue's tick partitions (at 1,000 queues it passed the daemon's 10 s
    -- statement timeout, and the daemon never started)
    SELECT max(h.tick_xmax) INTO tick_max FROM pglogq.tick_head h;
    max_txid_seen := CASE WHEN st.max_txid_seen IS NULL THEN tick_max
                          WHEN tick_max IS NULL THEN st.max_txid_seen
                          ELSE greatest(st.max_txid_seen, tick_max) END;
    IF max_txid_seen IS NOT NULL AND current_txid < max_txid_seen THEN
        RAISE EXCEPTION 'transaction ids went backwards: this database has seen txid % (cluster %) '
                        'but the current txid is % (cluster %); it looks restored into another cluster '
                        'and ticking would mis-batch events',
            max_txid_seen, coalesce(previous_system_id::text, 'unknown'), current_txid, system_id
            USING ERRCODE = 'PQ040',
                  HINT = format('stop this cluster and raise its transaction id epoch above the old one '
                                '(pg_resetwal --epoch=%s), or recreate the queues; '
                                'see docs/how-to/ticker-in-production.md',
                                floor(max_txid_seen::text::numeric / 4294967296)::bigint + 1);
    END IF;
    status := CASE WHEN previous_system_id IS NULL THEN 'first run'
                   WHEN previous_system_id <> system_id THEN 'new cluster'
                   ELSE 'ok' END;
    IF save THEN
        UPDATE pglogq.ticker_state s
           SET system_id = ticker_check.system_id,
               max_txid_seen = CASE WHEN s.max_txid_seen IS NULL OR s.max_txid_seen < current_txid
                                    THEN current_txid ELSE s.max_txid_seen END,
               last_run_at = now()
         WHERE s.singleton;
    END IF;
    RETURN NEXT;
END $$;
