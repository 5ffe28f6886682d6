-- pglogq._check_event(payload, type, headers, priority, max_bytes, pos): validate one event.
-- Parameters: the event's fields; max_bytes  the queue's max_payload_bytes;
--             pos  index in a batch (for the message), or NULL
-- Returns:    nothing.
-- Raises:     PQ006 payload and headers together larger than max_bytes (their stored jsonb sizes,
--             pg_column_size: typically 1.2 to 1.5 times the JSON text; the message gives both); PQ007 invalid payload/type/headers; PQ019 priority out of range.
-- Tables:     none.
CREATE OR REPLACE FUNCTION pglogq._check_event(
    payload jsonb, type text, headers jsonb, priority integer, max_bytes integer, pos integer)
RETURNS void LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    at text := CASE WHEN pos IS NULL THEN '' ELSE format(' (batch element %s)', pos) END;
BEGIN
    IF payload IS NULL THEN
        RAISE EXCEPTION 'payload must not be NULL%', at USING ERRCODE = 'PQ007';
    END IF;
    -- The cap counts the jsonb form the event is stored in, not the JSON text the caller wrote:
    -- that text depends on the caller's serializer (whitespace, escapes, number notation), the
    -- stored form does not, and it is what the row, the WAL and every consumer's page carry.
    -- The refusal names both figures, so that nobody has to guess why 1 MB of JSON text is over
    -- a cap of 1 MiB (jsonb is typically 1.2 to 1.5 times the compact text).
    IF pg_column_size(payload) + coalesce(pg_column_size(headers), 0) > max_bytes THEN
        RAISE EXCEPTION 'payload too large%: % bytes stored as jsonb (payload %, headers %; as JSON text % bytes), '
                        'the queue accepts at most % bytes stored as jsonb', at,
            pg_column_size(payload) + coalesce(pg_column_size(headers), 0), pg_column_size(payload),
            coalesce(pg_column_size(headers), 0),
            octet_length(payload::text) + coalesce(octet_length(headers::text), 0), max_bytes
            USING ERRCODE = 'PQ006',
                  HINT = 'max_payload_bytes counts payload plus headers in their stored jsonb form (typically '
                         '1.2 to 1.5 times the JSON text); raise it with set_queue_config(queue, '
                         '''max_payload_bytes'', ...)';
    END IF;
    IF headers IS NOT NULL AND jsonb_typeof(headers) <> 'object' THEN
        RAISE EXCEPTION 'headers must be a JSON object%, got %', at, jsonb_typeof(headers)
            USING ERRCODE = 'PQ007';
    END IF;
    IF type IS NOT NULL AND (type = '' OR octet_length(type) > 255) THEN
        RAISE EXCEPTION 'invalid event type%: must be 1 to 255 bytes', at USING ERRCODE = 'PQ007';
    END IF;
    IF priority IS NULL OR priority < 0 OR priority > 32767 THEN
        RAISE EXCEPTION 'invalid priority%: % (use 0..32767, higher first)', at, priority
            USING ERRCODE = 'PQ019';
    END IF;
END $$;
