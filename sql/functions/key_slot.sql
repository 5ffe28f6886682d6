-- pglogq.key_slot(key): the hash slot of an event key, 0..16383 (the one owner of the key hash).
-- Parameters: key  any text (NULL gives NULL)
-- Returns:    the first 4 bytes of md5(key) (the key's bytes in the database encoding: UTF-8 in
--             a UTF-8 database) read as an unsigned big-endian number, modulo 16384.
-- Raises:     nothing.
-- Tables:     none.
-- A queue of N partitions puts an event with this key into partition key_slot(key) % N, so every
-- event of one key lands in one partition.  The same rule in Python: pglogq.key_slot (md5 of the
-- UTF-8 bytes), so a client can tell a key's partition without asking the server.  Stable across
-- PostgreSQL versions and platforms (md5 is fixed; hashtext is not documented as stable).
CREATE OR REPLACE FUNCTION pglogq.key_slot(key text)
RETURNS integer LANGUAGE plpgsql IMMUTABLE STRICT PARALLEL SAFE SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    RETURN (('x' || substr(md5(key), 1, 8))::bit(32)::bigint % 16384)::integer;
END $$;
