-- pglogq._dead_letter_counted(): keep pglogq.dead_letter_count (the one owner of the counts).
-- Parameters: none (a statement trigger of dead_letter: AFTER INSERT with the new rows as
--             "added", AFTER DELETE with the old rows as "removed", AFTER TRUNCATE).
-- Returns:    NULL.
-- Raises:     nothing.
-- Tables:     dead_letter_count (insert, update, delete).
-- One statement, one change per consumer, in the transaction that adds or removes the dead
-- letters: the count commits or rolls back with them, and concurrent changes of one consumer's
-- count queue on its row lock (never lost).  The rows are locked in sub_id order, so two
-- statements touching several consumers cannot deadlock on them.  A DELETE cascaded from a
-- dropped consumer or queue finds its count row gone or going: nothing to update.
CREATE OR REPLACE FUNCTION pglogq._dead_letter_counted()
RETURNS trigger LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    r record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        INSERT INTO pglogq.dead_letter_count AS c (sub_id, queue_id, dead_letters)
        SELECT a.sub_id, min(a.queue_id), count(*) FROM added a GROUP BY a.sub_id ORDER BY a.sub_id
        ON CONFLICT (sub_id) DO UPDATE SET dead_letters = c.dead_letters + excluded.dead_letters;
    ELSIF TG_OP = 'DELETE' THEN
        FOR r IN SELECT o.sub_id, count(*) AS n FROM removed o GROUP BY o.sub_id ORDER BY o.sub_id LOOP
            UPDATE pglogq.dead_letter_count c SET dead_letters = c.dead_letters - r.n WHERE c.sub_id = r.sub_id;
        END LOOP;
    ELSE
        DELETE FROM pglogq.dead_letter_count;
    END IF;
    RETURN NULL;
END $$;
