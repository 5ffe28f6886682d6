-- pglogq.maint_run(op, queue_name): run one maintenance step named by maint_operations().
-- Parameters: op  pump | meta | head | history | retention | rotate_step1 | rotate_step2 | prune |
--             release; queue_name (NULL for pump, meta, head and history)
-- Returns:    what the step returns, as an integer (booleans as 0/1).
-- Raises:     PQ019 unknown op, or a queue name given to pump; PQ001 unknown queue (NULL too).
-- Tables:     as the step.  Only these fixed functions can run; no name is ever looked up.
CREATE OR REPLACE FUNCTION pglogq.maint_run(op text, queue_name text DEFAULT NULL)
RETURNS integer LANGUAGE plpgsql SECURITY DEFINER
SET search_path = pglogq, pg_catalog, pg_temp AS $$
BEGIN
    IF op = 'pump' AND queue_name IS NOT NULL THEN
        RAISE EXCEPTION 'maintenance operation "pump" moves the due events of every queue: pass no queue name'
            USING ERRCODE = 'PQ019';
    END IF;
    IF op = 'meta' AND queue_name IS NOT NULL THEN
        RAISE EXCEPTION 'maintenance operation "meta" rotates the metadata of every queue: pass no queue name'
            USING ERRCODE = 'PQ019';
    END IF;
    IF op = 'head' AND queue_name IS NOT NULL THEN
        RAISE EXCEPTION 'maintenance operation "head" compacts the last tick of every queue: pass no queue name'
            USING ERRCODE = 'PQ019';
    END IF;
    IF op = 'history' AND queue_name IS NOT NULL THEN
        RAISE EXCEPTION 'maintenance operation "history" rotates the outcome log of every queue: pass no queue name'
            USING ERRCODE = 'PQ019';
    END IF;
    CASE op
        WHEN 'pump' THEN RETURN pglogq.maint_pump();
        WHEN 'meta' THEN RETURN pglogq.maint_rotate_meta()::integer;
        WHEN 'head' THEN RETURN pglogq.maint_compact_head()::integer;
        WHEN 'history' THEN RETURN pglogq.maint_rotate_history()::integer;
        WHEN 'retention' THEN RETURN pglogq.maint_retention(queue_name);
        WHEN 'rotate_step1' THEN RETURN pglogq.maint_rotate_step1(queue_name)::integer;
        WHEN 'rotate_step2' THEN RETURN pglogq.maint_rotate_step2(queue_name)::integer;
        WHEN 'prune' THEN RETURN pglogq.maint_prune(queue_name);
        WHEN 'release' THEN RETURN pglogq.maint_release(queue_name);
        ELSE
            RAISE EXCEPTION 'unknown maintenance operation "%"', left(coalesce(op, 'NULL'), 80)
                USING ERRCODE = 'PQ019';
    END CASE;
END $$;
