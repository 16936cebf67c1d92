-- Flow control across the cluster: concurrency groups (a limit of runs in flight, an optional
-- rate of starts), priorities and overlap policies.
--
-- A run of a job that belongs to a group, or whose overlap policy is not `allow`, is written
-- `queued` instead of `scheduled`/`publishing`. The admin that holds the group's shard (or, for
-- a job without a group, the job's shard) releases queued runs under the group's row lock (a
-- job's: an advisory lock): it counts the group's runs in flight (`scheduled`, `publishing`,
-- `running`: from release to the end the worker reports, or `lost`), releases the highest
-- priority, oldest runs into the free slots as `scheduled` (`released_at`), and the holder of
-- each run's shard publishes it as any other. Slots are never counted apart from the runs, so
-- none can leak: a run's end frees its slot.

CREATE TABLE concurrency_groups (
    id         BIGSERIAL PRIMARY KEY,
    name       TEXT NOT NULL UNIQUE CHECK (name ~ '^[A-Za-z0-9][A-Za-z0-9._-]{0,99}$'),
    "limit"    INT NOT NULL CHECK ("limit" BETWEEN 1 AND 100000),
    -- Starts spread so that no second sees more than rate_per_second + rate_burst of them.
    rate_per_second DOUBLE PRECISION CHECK (rate_per_second > 0 AND rate_per_second <= 100000),
    rate_burst INT NOT NULL DEFAULT 0 CHECK (rate_burst BETWEEN 0 AND 100000),
    -- The releaser's bookkeeping of the rate: the releases of about the last second.
    released_recent TIMESTAMPTZ[] NOT NULL DEFAULT '{}',
    -- Which admin releases its runs: the holder of this shard.
    shard      INT NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

ALTER TABLE jobs
    ADD COLUMN concurrency_group TEXT REFERENCES concurrency_groups (name) ON UPDATE CASCADE,
    ADD COLUMN priority INT NOT NULL DEFAULT 0,
    ADD COLUMN overlap TEXT NOT NULL DEFAULT 'allow'
        CHECK (overlap IN ('allow', 'skip', 'buffer_one', 'buffer_all', 'cancel_other'));
CREATE INDEX jobs_concurrency_group ON jobs (concurrency_group) WHERE concurrency_group IS NOT NULL;
-- Jobs whose runs are released one at a time by their own shard's holder.
CREATE INDEX jobs_overlap ON jobs (shard) WHERE overlap <> 'allow' AND concurrency_group IS NULL;

-- A run's group and priority are copied from its job when it is written (a job that moves to
-- another group takes its queued runs along). `queue_key` is what its release is decided
-- under: `g:<group>` or `j:<job id>`; NULL for every run that is never queued.
ALTER TABLE triggers
    ADD COLUMN queue_key TEXT,
    ADD COLUMN priority INT,
    ADD COLUMN released_at TIMESTAMPTZ;

-- The queue, in release order.
CREATE INDEX triggers_queued ON triggers (queue_key, priority DESC, fire_time, id)
    WHERE status = 'queued';
-- The runs in flight of each queue key (only runs that have one enter it).
CREATE INDEX triggers_in_flight ON triggers (queue_key, job_id)
    WHERE queue_key IS NOT NULL AND status IN ('scheduled', 'publishing', 'running');
-- When the releaser asked a worker to cancel the run (overlap policy cancel_other): asked once.
ALTER TABLE triggers ADD COLUMN cancel_requested_at TIMESTAMPTZ;

-- The queue key of a job's runs (see above); NULL: they are never queued.
CREATE FUNCTION cadenza_queue_key(job_id BIGINT, concurrency_group TEXT, overlap TEXT)
RETURNS TEXT LANGUAGE sql IMMUTABLE AS $$
    SELECT CASE WHEN concurrency_group IS NOT NULL THEN 'g:' || concurrency_group
                WHEN overlap <> 'allow' THEN 'j:' || job_id
           END
$$;
