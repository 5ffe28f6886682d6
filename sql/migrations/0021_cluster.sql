-- 0021_cluster: one queue across several PostgreSQL servers: the shard map every
-- member stores, the moves of slots between members, and the gates of consumers on a shard that
-- took slots over.
--
-- pglogq.cluster_node   one row at most: this database is a member of cluster cluster_name as
--                       shard shard_name, under map version map_version (grows by 1 per change)
-- pglogq.cluster_shard  the shards of the current map (their DSNs carry no password: clients
--                       bring their own credentials)
-- pglogq.cluster_slots  ranges of hash slots (pglogq.key_slot) covering 0..slot_count-1 exactly
--                       once, each owned by one shard
-- pglogq.cluster_move   a move of a slot range from one shard to another, on both shards:
--                       importing (target took the slots), exported (source gave them away; its
--                       fences: {queue_name: tick_id on the source}), done
-- pglogq.cluster_gate   on the target of a move: consumer sub_id of queue_id may not receive
--                       there until it finished the source up to the move's fence
-- pglogq.queue.sharded  the hot-path switch: set on every queue of a member; a queue that is
--                       not sharded pays nothing for the cluster
-- pglogq.cluster_epoch  the map version of the last export, set outside the transaction
--                       (sequences are not transactional): a REPEATABLE READ transaction whose
--                       snapshot predates a map change sees a larger epoch than map version
CREATE TABLE pglogq.cluster_node (
    singleton     boolean PRIMARY KEY DEFAULT true CHECK (singleton),
    cluster_name  text NOT NULL,
    shard_name    text NOT NULL,
    map_version   bigint NOT NULL CHECK (map_version >= 1),
    slot_count    integer NOT NULL DEFAULT 16384 CHECK (slot_count = 16384),
    updated_at    timestamptz NOT NULL DEFAULT now()
);

CREATE TABLE pglogq.cluster_shard (
    shard_name  text PRIMARY KEY,
    dsn         text NOT NULL
);

CREATE TABLE pglogq.cluster_slots (
    slot_lo     integer PRIMARY KEY CHECK (slot_lo BETWEEN 0 AND 16383),
    slot_hi     integer NOT NULL CHECK (slot_hi BETWEEN slot_lo AND 16383),
    shard_name  text NOT NULL REFERENCES pglogq.cluster_shard ON UPDATE CASCADE
);

CREATE TABLE pglogq.cluster_move (
    move_id        bigint PRIMARY KEY,
    map_version    bigint NOT NULL,
    slot_lo        integer NOT NULL CHECK (slot_lo BETWEEN 0 AND 16383),
    slot_hi        integer NOT NULL CHECK (slot_hi BETWEEN slot_lo AND 16383),
    from_shard     text NOT NULL,
    to_shard       text NOT NULL CHECK (to_shard <> from_shard),
    state          text NOT NULL CHECK (state IN ('importing', 'exported', 'done')),
    fences         jsonb,
    exported_txid  xid8,          -- the source's exporting transaction (cluster_fence runs after it)
    created_at     timestamptz NOT NULL DEFAULT now(),
    finished_at    timestamptz
);

CREATE TABLE pglogq.cluster_gate (
    move_id   bigint NOT NULL REFERENCES pglogq.cluster_move ON DELETE CASCADE,
    queue_id  integer NOT NULL REFERENCES pglogq.queue ON DELETE CASCADE,
    sub_id    integer NOT NULL REFERENCES pglogq.subscriber ON DELETE CASCADE,
    PRIMARY KEY (queue_id, sub_id, move_id)
);
CREATE INDEX cluster_gate_move_idx ON pglogq.cluster_gate (move_id);

ALTER TABLE pglogq.queue ADD COLUMN sharded boolean NOT NULL DEFAULT false;

CREATE SEQUENCE pglogq.cluster_epoch MINVALUE 0 START 0;
