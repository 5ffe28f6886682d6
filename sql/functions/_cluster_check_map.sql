-- pglogq._cluster_check_map(map, cluster_name): refuse a shard map that is not whole and valid.
-- Parameters: map  {"version": n, "shards": [{"name", "dsn"}, ...], "ranges": [{"lo", "hi",
--             "shard"}, ...]} (other keys of cluster_map's answer are allowed: "cluster" must then
--             name cluster_name, "slot_count" must be 16384, "self" and "moves" are ignored);
--             cluster_name  the cluster the map must belong to
-- Returns:    the map's version.
-- Raises:     PQ081 invalid map: not an object, another cluster, a version that is not a whole
--             number >= 1, no shards, a bad or repeated shard name, a DSN that is empty, longer
--             than 1000 bytes or holds a password, a range that is not {lo, hi, shard} with
--             0 <= lo <= hi <= 16383, a range of a shard not listed, a hole or an overlap (the
--             message names the first slot concerned).
-- Tables:     none.
CREATE OR REPLACE FUNCTION pglogq._cluster_check_map(map jsonb, cluster_name text)
RETURNS bigint LANGUAGE plpgsql IMMUTABLE
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    v numeric;
    e jsonb;
    names text[] := '{}';
    nm text;
    d text;
    lo numeric;
    hi numeric;
    expect integer := 0;
BEGIN
    IF map IS NULL OR jsonb_typeof(map) <> 'object' THEN
        RAISE EXCEPTION 'invalid shard map: a JSON object is expected, got %', coalesce(jsonb_typeof(map), 'NULL')
            USING ERRCODE = 'PQ081';
    END IF;
    IF map ? 'cluster' AND map ->> 'cluster' IS DISTINCT FROM cluster_name THEN
        RAISE EXCEPTION 'invalid shard map: it is the map of cluster "%", not of "%"',
            left(map ->> 'cluster', 80), cluster_name USING ERRCODE = 'PQ081';
    END IF;
    IF jsonb_typeof(map -> 'version') IS DISTINCT FROM 'number' OR (map ->> 'version')::numeric < 1
       OR (map ->> 'version')::numeric <> trunc((map ->> 'version')::numeric)
       OR (map ->> 'version')::numeric > 9000000000000000000 THEN
        RAISE EXCEPTION 'invalid shard map: version must be a whole number >= 1, got %',
            coalesce(left(map ->> 'version', 40), 'none') USING ERRCODE = 'PQ081';
    END IF;
    v := (map ->> 'version')::numeric;
    IF map ? 'slot_count' AND (map -> 'slot_count') IS DISTINCT FROM '16384'::jsonb THEN
        RAISE EXCEPTION 'invalid shard map: slot_count must be 16384, got %', left(map ->> 'slot_count', 40)
            USING ERRCODE = 'PQ081';
    END IF;
    IF jsonb_typeof(map -> 'shards') IS DISTINCT FROM 'array' OR jsonb_array_length(map -> 'shards') = 0
       OR jsonb_array_length(map -> 'shards') > 1000 THEN
        RAISE EXCEPTION 'invalid shard map: "shards" must be an array of 1 to 1000 {"name", "dsn"} objects'
            USING ERRCODE = 'PQ081';
    END IF;
    FOR e IN SELECT x FROM jsonb_array_elements(map -> 'shards') x LOOP
        nm := CASE WHEN jsonb_typeof(e -> 'name') = 'string' THEN e ->> 'name' END;
        d := CASE WHEN jsonb_typeof(e -> 'dsn') = 'string' THEN e ->> 'dsn' END;
        IF jsonb_typeof(e) <> 'object' OR nm IS NULL OR nm !~ '^[A-Za-z][A-Za-z0-9_.-]{0,62}$' THEN
            RAISE EXCEPTION 'invalid shard map: bad shard %: a name is 1 to 63 ASCII letters, digits or _.-, starting with a letter',
                left(e::text, 120) USING ERRCODE = 'PQ081';
        END IF;
        IF nm = ANY (names) THEN
            RAISE EXCEPTION 'invalid shard map: shard "%" is listed twice', nm USING ERRCODE = 'PQ081';
        END IF;
        IF d IS NULL OR d = '' OR octet_length(d) > 1000 THEN
            RAISE EXCEPTION 'invalid shard map: shard "%" needs a DSN of 1 to 1000 bytes', nm USING ERRCODE = 'PQ081';
        END IF;
        IF d ~* '(^|[[:space:]?&])password[[:space:]]*=' OR d ~* '^postgres(ql)?://[^@/?]*:[^@/?]*@' THEN
            RAISE EXCEPTION 'invalid shard map: the DSN of shard "%" holds a password', nm
                USING ERRCODE = 'PQ081',
                      HINT = 'the map is stored in every shard and read by every client: store host, port, '
                             'dbname (and user); clients bring their own credentials';
        END IF;
        names := names || nm;
    END LOOP;
    IF jsonb_typeof(map -> 'ranges') IS DISTINCT FROM 'array' OR jsonb_array_length(map -> 'ranges') = 0
       OR jsonb_array_length(map -> 'ranges') > 16384 THEN
        RAISE EXCEPTION 'invalid shard map: "ranges" must be an array of 1 to 16384 {"lo", "hi", "shard"} objects'
            USING ERRCODE = 'PQ081';
    END IF;
    FOR e IN SELECT x FROM jsonb_array_elements(map -> 'ranges') x LOOP
        IF jsonb_typeof(e) <> 'object' OR jsonb_typeof(e -> 'lo') IS DISTINCT FROM 'number'
           OR jsonb_typeof(e -> 'hi') IS DISTINCT FROM 'number' OR jsonb_typeof(e -> 'shard') IS DISTINCT FROM 'string' THEN
            RAISE EXCEPTION 'invalid shard map: bad range %: {"lo": slot, "hi": slot, "shard": name} expected',
                left(e::text, 120) USING ERRCODE = 'PQ081';
        END IF;
        lo := (e ->> 'lo')::numeric;
        hi := (e ->> 'hi')::numeric;
        IF lo <> trunc(lo) OR hi <> trunc(hi) OR lo < 0 OR hi > 16383 OR lo > hi THEN
            RAISE EXCEPTION 'invalid shard map: range %-% is not within slots 0..16383 (lo <= hi, whole numbers)',
                left(e ->> 'lo', 20), left(e ->> 'hi', 20) USING ERRCODE = 'PQ081';
        END IF;
        IF NOT (e ->> 'shard') = ANY (names) THEN
            RAISE EXCEPTION 'invalid shard map: range %-% names shard "%", which is not listed in "shards"',
                lo, hi, left(e ->> 'shard', 80) USING ERRCODE = 'PQ081';
        END IF;
    END LOOP;
    FOR lo, hi IN SELECT (x ->> 'lo')::numeric, (x ->> 'hi')::numeric FROM jsonb_array_elements(map -> 'ranges') x
                   ORDER BY 1, 2 LOOP
        IF lo > expect THEN
            RAISE EXCEPTION 'invalid shard map: slots %-% belong to no shard (a hole)', expect, lo - 1
                USING ERRCODE = 'PQ081';
        ELSIF lo < expect THEN
            RAISE EXCEPTION 'invalid shard map: slot % is in two ranges (an overlap)', lo USING ERRCODE = 'PQ081';
        END IF;
        expect := hi + 1;
    END LOOP;
    IF expect <= 16383 THEN
        RAISE EXCEPTION 'invalid shard map: slots %-16383 belong to no shard (a hole)', expect USING ERRCODE = 'PQ081';
    END IF;
    RETURN v::bigint;
END $$;
