-- pglogq._check_name(name, kind, max_len): validate a queue or consumer name.
-- Parameters: name  the name given by the caller
--             kind  'queue' or 'consumer' (for the message)
--             max_len  longest name accepted, in bytes
-- Returns:    the name, unchanged.
-- Raises:     PQ004 invalid name (NULL, empty, too long, not ASCII letters/digits/_.-,
--             not starting with a letter).
-- Tables:     none.
CREATE OR REPLACE FUNCTION pglogq._check_name(name text, kind text, max_len integer)
RETURNS text LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF name IS NULL OR name = '' THEN
        RAISE EXCEPTION 'invalid % name: must not be empty', kind
            USING ERRCODE = 'PQ004';
    END IF;
    IF octet_length(name) > max_len THEN
        RAISE EXCEPTION 'invalid % name "%": longer than % bytes', kind, left(name, 80), max_len
            USING ERRCODE = 'PQ004';
    END IF;
    IF name !~ '^[A-Za-z][A-Za-z0-9_.-]*$' THEN
        RAISE EXCEPTION 'invalid % name "%": use ASCII letters, digits, "_", "." and "-", starting with a letter',
            kind, left(name, 80)
            USING ERRCODE = 'PQ004';
    END IF;
    RETURN name;
END $$;
