-- pglogq._lease_detail(tries, lock_ends): what lookup adds to the detail of an event in a lease.
-- Parameters: tries  the event's failed deliveries before this one (NULL: unknown); lock_ends
--             when its holder's lock ends unless renewed (NULL: not a lease)
-- Returns:    '' when lock_ends is NULL; else '; in a lease: delivery N, its lock ends at T unless
--             renewed' (or 'ended at T: the next worker that asks takes it over').
-- Raises:     nothing.
-- Tables:     none.
-- One sentence for both of lookup's in-flight answers (progress reported or not), so they read alike.
CREATE OR REPLACE FUNCTION pglogq._lease_detail(tries integer, lock_ends timestamptz)
RETURNS text LANGUAGE plpgsql STABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF lock_ends IS NULL THEN
        RETURN '';
    END IF;
    RETURN format('; in a lease: delivery %s, ', coalesce((tries + 1)::text, 'unknown'))
           || CASE WHEN lock_ends > clock_timestamp()
                   THEN format('its lock ends at %s unless renewed', lock_ends)
                   ELSE format('its lock ended at %s: the next worker that asks takes it over', lock_ends) END;
END $$;
