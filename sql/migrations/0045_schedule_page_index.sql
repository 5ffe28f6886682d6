-- 0045_schedule_page_index: a page of one queue's schedules is read in its order from an index.
--
-- schedule_list(q, max_rows) returns the queue's soonest schedules first (next_due, then id).
-- The only due-time index, (next_due), serves the ticker's pass over every queue; for one
-- queue the page read every schedule of the queue and sorted them (22 ms for a page of 50 at
-- 10,000 schedules).  This index holds each queue's schedules in the page's order.
CREATE INDEX IF NOT EXISTS schedule_queue_due_idx ON pglogq.schedule (queue_id, next_due, schedule_id);
