-- Retention by dropping whole partitions: `triggers` becomes a table partitioned by ranges of
-- `id`, one partition per period of time. Every period gets a fresh block of 2^40 ids (block b
-- holds [b·2^40, (b+1)·2^40)): when a period ends, the admin creates the next block's partition
-- and moves the id sequence to its start, so a partition holds the runs created during its
-- period, and once the period after it started longer ago than the retention, the partition is
-- dropped whole. Lookups by id (every statement of the hot path) touch one partition.
--
-- Unique indexes cannot span partitions unless they contain `id`, so the ones that deduplicate
-- (a fire time per job and shard, a retry per failed run, a child per parent) are per partition.
-- A run's follow-ups are written once anyway (in the transaction of its terminal transition);
-- these indexes are the second line of defence.

-- The old table becomes block 0. Free the names the partitioned table takes.
ALTER TABLE triggers RENAME TO triggers_b0;
ALTER TABLE triggers_b0 RENAME CONSTRAINT triggers_pkey TO triggers_b0_pkey;
ALTER INDEX triggers_job RENAME TO triggers_b0_job;
ALTER INDEX triggers_pending RENAME TO triggers_b0_pending;
ALTER INDEX triggers_partition_offset RENAME TO triggers_b0_partition_offset;
ALTER INDEX triggers_fire_group RENAME TO triggers_b0_fire_group;
ALTER INDEX triggers_parent RENAME TO triggers_b0_parent;
ALTER INDEX triggers_running RENAME TO triggers_b0_running;
ALTER INDEX triggers_requested RENAME TO triggers_b0_requested;
ALTER INDEX triggers_type_fire RENAME TO triggers_b0_type_fire;
ALTER INDEX triggers_job_fire_time RENAME TO triggers_b0_job_fire_time;
ALTER INDEX triggers_one_retry RENAME TO triggers_b0_one_retry;
ALTER INDEX triggers_one_child RENAME TO triggers_b0_one_child;
-- Alarms outlive nothing: they are deleted with their partition's runs.
ALTER TABLE alarms DROP CONSTRAINT alarms_trigger_id_fkey;

CREATE TABLE triggers (LIKE triggers_b0 INCLUDING DEFAULTS) PARTITION BY RANGE (id);
ALTER SEQUENCE triggers_id_seq OWNED BY triggers.id;
ALTER TABLE triggers ADD CONSTRAINT triggers_pkey PRIMARY KEY (id);
ALTER TABLE triggers ADD CONSTRAINT triggers_job_id_fkey
    FOREIGN KEY (job_id) REFERENCES jobs (id) ON DELETE CASCADE;
CREATE INDEX triggers_job ON triggers (job_id, id DESC);
CREATE INDEX triggers_pending ON triggers (shard, fire_time)
    WHERE status IN ('scheduled', 'publishing');
CREATE INDEX triggers_partition_offset ON triggers (job_type, partition, "offset")
    WHERE "offset" IS NOT NULL;
CREATE INDEX triggers_fire_group ON triggers (fire_group) WHERE fire_group IS NOT NULL;
CREATE INDEX triggers_parent ON triggers (parent_id) WHERE parent_id IS NOT NULL;
CREATE INDEX triggers_running ON triggers (shard, started_at) WHERE status = 'running';
CREATE INDEX triggers_requested ON triggers (shard, fire_time)
    WHERE status = 'scheduled' AND kind IN ('manual', 'api', 'retry', 'child', 'replay');
CREATE INDEX triggers_type_fire ON triggers (job_type, fire_time) WHERE "offset" IS NOT NULL;

-- The partitions and when each began to receive runs.
CREATE TABLE trigger_partitions (
    block     BIGINT PRIMARY KEY,
    name      TEXT NOT NULL,
    starts_at TIMESTAMPTZ NOT NULL
);

-- Creates the next block's partition (with the per-partition unique indexes), attaches it, and
-- moves the id sequence to its start; returns the block. Callers serialise (advisory lock).
-- ATTACH needs only a SHARE UPDATE EXCLUSIVE lock: runs keep being written meanwhile.
CREATE FUNCTION cadenza_next_trigger_partition() RETURNS BIGINT LANGUAGE plpgsql AS $$
DECLARE
    span CONSTANT BIGINT := 1099511627776; -- 2^40
    b BIGINT;
    part TEXT;
BEGIN
    SELECT COALESCE(max(block), 0) + 1 INTO b FROM trigger_partitions;
    part := 'triggers_b' || b;
    EXECUTE format('CREATE TABLE %I (LIKE triggers INCLUDING DEFAULTS) WITH (autovacuum_analyze_scale_factor = 0.01, autovacuum_vacuum_scale_factor = 0.02)', part);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (job_id, fire_time, shard_index) WHERE kind IN (''cron'', ''fix_rate'', ''fix_delay'', ''once'', ''misfire'')', part || '_job_fire_time', part);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (parent_id) WHERE kind = ''retry''', part || '_one_retry', part);
    EXECUTE format('CREATE UNIQUE INDEX %I ON %I (parent_id, job_id, shard_index) WHERE kind = ''child''', part || '_one_child', part);
    EXECUTE format('ALTER TABLE triggers ATTACH PARTITION %I FOR VALUES FROM (%s) TO (%s)', part, b * span, (b + 1) * span);
    INSERT INTO trigger_partitions (block, name, starts_at) VALUES (b, part, now());
    PERFORM setval('triggers_id_seq', b * span, false);
    RETURN b;
END $$;

-- Block 0 holds every id issued so far (and any issued until block 1 takes over).
ALTER TABLE triggers ATTACH PARTITION triggers_b0 FOR VALUES FROM (MINVALUE) TO (1099511627776);
INSERT INTO trigger_partitions (block, name, starts_at)
SELECT 0, 'triggers_b0', COALESCE(min(created_at), now()) FROM triggers_b0;
SELECT cadenza_next_trigger_partition();
