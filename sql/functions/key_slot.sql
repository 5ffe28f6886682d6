-- pglogq.key_slot(key): the hash slot of an event key, 0..16383 (the one owner of the key hash).
-- Parameters: key  any text (NULL gives NULL)
-- Returns:    the first 4 bytes of md5(key) (the key's bytes in the database encoding: UTF-8 in
--             a UTF-8 database) read as an unsigned big-endian number, modulo 16384.
-- Raises:     nothing.
-- Tables:     none.
-- A queue of N partitions puts an event with this key into partition key_slot(key) % N, so every
-- event of one key lands in one partition.  The same rule in Python: pglogq.key_slot (md5 of the
-- UTF-8 bytes), so a client can tell a key's partition without asking the server.  Stable across
-- PostgreSQL versions and platforms (md5 is fixed; hashtext is not documented as stable).  No SET
-- clause, so that it is inlined into the sends that call it (a SET makes every call a separate
-- function call with its own configuration change).
CREATE OR REPLACE FUNCTION pglogq.key_slot(key text)
RETURNS integer LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE AS $$
    SELECT (('x' OPERATOR(pg_catalog.||) pg_catalog.substr(pg_catalog.md5(key), 1, 8))::pg_catalog.bit(32)::pg_catalog.int8
            OPERATOR(pg_catalog.%) 16384)::pg_catalog.int4;
$$;
