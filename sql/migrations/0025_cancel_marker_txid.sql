-- 0025_cancel_marker_txid: an index of the cancel markers by their event's transaction.
--
-- A page of a batch tests its events against the queue's cancel markers.  With the markers of
-- a mass cancel (or of a steady trickle over a rotation) in the table, the page's plan hashed
-- all of them for every page.  With this index receive asks first whether any marker lies in
-- the batch's transaction range (one probe) and, when one does, probes the primary key per row
-- of the page; maint_prune deletes the markers below the oldest transaction the queue still
-- stores (a range of this index) instead of checking every marker against the event tables.
CREATE INDEX IF NOT EXISTS cancelled_txid_idx ON pglogq.cancelled (queue_id, ev_txid);
