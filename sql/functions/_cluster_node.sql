-- pglogq._cluster_node(): this database's membership row, or an error.
-- Parameters: none.
-- Returns:    the pglogq.cluster_node row.
-- Raises:     PQ082 this database is not a member of a cluster.
-- Tables:     cluster_node (read).
CREATE OR REPLACE FUNCTION pglogq._cluster_node()
RETURNS pglogq.cluster_node LANGUAGE plpgsql
SET search_path = pglogq, pg_catalog, pg_temp AS $$
DECLARE
    n pglogq.cluster_node;
BEGIN
    SELECT * INTO n FROM pglogq.cluster_node;
    IF NOT FOUND THEN
        RAISE EXCEPTION 'this database is not a member of a cluster'
            USING ERRCODE = 'PQ082',
                  HINT = 'pglogq cluster init (or add-shard) makes it one; pglogq.cluster_join() does it in SQL';
    END IF;
    RETURN n;
END $$;
