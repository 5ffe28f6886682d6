-- 0042_cancel_marker_probe: the markers' txid index serves the txid ranges only, never a probe of one marker.
--
-- A page of receive probes the markers per event read (queue_id, msg_id: the primary key).  The
-- txid index (queue_id, ev_txid) of 0025 also matched that probe on queue_id alone, and a plan
-- made while the statistics said the table held a row or two (a generic plan, kept for the
-- session) took it at the same cost, being smaller: after a mass cancel each probe read every
-- marker of the queue (5,000 markers: 3 s for a page of 100, where the primary key reads one).
-- Its predicate, true of every marker (ev_txid is NOT NULL), is implied only by a condition on
-- ev_txid: the range tests of receive, _batch_page and maint_prune still use it, and a probe
-- without one can use the primary key only (a sequential scan is off in receive's functions).
DROP INDEX IF EXISTS pglogq.cancelled_txid_idx;
CREATE INDEX cancelled_txid_idx ON pglogq.cancelled (queue_id, ev_txid) WHERE ev_txid IS NOT NULL;
