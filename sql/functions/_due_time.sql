-- pglogq._due_time(deliver_at, delay): when a delayed send becomes deliverable.
-- Parameters: deliver_at  an absolute time, or NULL; delay  an interval >= 0, or NULL
-- Returns:    the due time, or NULL when the event is to be delivered at once.
-- Raises:     PQ011 both given, negative delay, infinite deliver_at, or more than 10 years ahead.
--             A deliver_at in the past means "now".
-- Tables:     none.
CREATE OR REPLACE FUNCTION pglogq._due_time(deliver_at timestamptz, delay interval)
RETURNS timestamptz LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    due timestamptz;
BEGIN
    IF deliver_at IS NOT NULL AND delay IS NOT NULL THEN
        RAISE EXCEPTION 'give deliver_at or delay, not both' USING ERRCODE = 'PQ011';
    END IF;
    IF delay IS NOT NULL AND delay < interval '0' THEN
        RAISE EXCEPTION 'invalid delay %: must not be negative', delay USING ERRCODE = 'PQ011';
    END IF;
    IF deliver_at IN ('infinity', '-infinity') THEN
        RAISE EXCEPTION 'invalid deliver_at %: give a finite time', deliver_at USING ERRCODE = 'PQ011';
    END IF;
    due := coalesce(deliver_at, clock_timestamp() + delay);
    IF due IS NULL OR due <= clock_timestamp() THEN
        RETURN NULL;
    END IF;
    IF due > clock_timestamp() + interval '10 years' OR due = 'infinity' THEN
        RAISE EXCEPTION 'invalid delivery time %: more than 10 years ahead', due USING ERRCODE = 'PQ011';
    END IF;
    RETURN due;
END $$;
