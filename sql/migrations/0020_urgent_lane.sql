-- 0020_urgent_lane: an urgent lane that jumps a backlog (issue 14, priority).
--
-- pglogq.queue.urgent_lane  true: the events sent with a priority above 100 (the default
--                          priority) are urgent; each consumer reads them through a stream of
--                          their own (subscriber.stream = -1) whose cursor runs ahead of the
--                          consumer's, so that an urgent event is handed out at the consumer's
--                          next receive however long the backlog of ordinary events is.  Set at
--                          create_queue, on a queue of one partition.
-- The partial index finds the urgent events of a tick range without reading the others.
ALTER TABLE pglogq.queue ADD COLUMN urgent_lane boolean NOT NULL DEFAULT false;
CREATE INDEX event_urgent_idx ON pglogq.event (ev_txid, ev_id) WHERE ev_priority > 100;
