-- pglogq._check_keys(keys, n): refuse a bad keys array of send_batch / send_batch_json.
-- Parameters: keys  the event keys (one per payload); n  the number of payloads
-- Returns:    nothing (void) when every key is valid.
-- Raises:     PQ076 when keys has not n elements, holds a NULL, or a key is empty or longer than
--             255 bytes (the message names the first bad position, 1-based).
-- Tables:     none.
-- Called only when keys is given: a batch without keys pays nothing.
CREATE OR REPLACE FUNCTION pglogq._check_keys(keys text[], n integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    bad bigint;
BEGIN
    IF array_ndims(keys) <> 1 THEN
        RAISE EXCEPTION 'keys must be a one-dimensional array, got % dimensions', array_ndims(keys)
            USING ERRCODE = 'PQ076';
    END IF;
    IF cardinality(keys) <> n THEN
        RAISE EXCEPTION 'keys has % elements, payloads has %', cardinality(keys), n USING ERRCODE = 'PQ076';
    END IF;
    SELECT min(o) INTO bad FROM unnest(keys) WITH ORDINALITY AS u(k, o)
     WHERE k IS NULL OR k = '' OR octet_length(k) > 255;
    IF bad IS NOT NULL THEN
        RAISE EXCEPTION 'invalid key at position %: %', bad,
            CASE WHEN keys[bad] IS NULL THEN 'NULL (leave keys NULL for events without a key)'
                 ELSE format('%s bytes (a key is 1 to 255 bytes)', octet_length(keys[bad])) END
            USING ERRCODE = 'PQ076';
    END IF;
END $$;
