-- Cadenza schema, version 1.
-- Times are timestamptz; durations are milliseconds in BIGINT; enums are their snake_case names.

-- Settings fixed when the cluster is first created (e.g. shard_count).
CREATE TABLE cluster_settings (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- Job types seen so far and the trigger topic the admin created for each.
CREATE TABLE job_types (
    job_type   TEXT PRIMARY KEY,
    topic      TEXT NOT NULL,
    partitions INT  NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);

CREATE TABLE jobs (
    id                   BIGSERIAL PRIMARY KEY,
    name                 TEXT    NOT NULL,
    job_type             TEXT    NOT NULL,
    -- the schedule as the API received it, e.g. {"kind":"cron","expr":"…","timezone":"…"}
    schedule             JSONB   NOT NULL,
    schedule_kind        TEXT    NOT NULL,
    route                TEXT    NOT NULL,
    block                TEXT    NOT NULL,
    misfire              TEXT    NOT NULL,
    misfire_threshold_ms BIGINT  NOT NULL,
    params               TEXT    NOT NULL DEFAULT '',
    timeout_ms           BIGINT  NOT NULL DEFAULT 0,
    retries              INT     NOT NULL DEFAULT 0,
    retry_backoff_ms     BIGINT  NOT NULL DEFAULT 0,
    children             BIGINT[] NOT NULL DEFAULT '{}',
    enabled              BOOLEAN NOT NULL DEFAULT TRUE,
    -- shard = id % shard_count, fixed at insert
    shard                INT     NOT NULL,
    -- the next fire time not yet written to triggers; NULL when nothing is due
    -- (disabled, a `once` that fired, `none`, or a `fix_delay` waiting for its run to finish)
    next_fire_at         TIMESTAMPTZ,
    created_at           TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at           TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- The scan: due jobs of a shard, cheapest first; jobs that are not due cost nothing.
CREATE INDEX jobs_due ON jobs (shard, next_fire_at) WHERE enabled AND next_fire_at IS NOT NULL;
CREATE INDEX jobs_job_type ON jobs (job_type);

-- One row per run.
CREATE TABLE triggers (
    id            BIGSERIAL PRIMARY KEY,
    job_id        BIGINT  NOT NULL REFERENCES jobs (id) ON DELETE CASCADE,
    job_type      TEXT    NOT NULL,
    shard         INT     NOT NULL,
    kind          TEXT    NOT NULL,
    status        TEXT    NOT NULL,
    fire_time     TIMESTAMPTZ NOT NULL,
    -- what the run was given, fixed when it was scheduled
    params        TEXT    NOT NULL,
    block         TEXT    NOT NULL,
    timeout_ms    BIGINT  NOT NULL,
    route         TEXT    NOT NULL,
    attempt       INT     NOT NULL DEFAULT 1,
    shard_index   INT     NOT NULL DEFAULT 0,
    shard_total   INT     NOT NULL DEFAULT 1,
    -- a worker named by a manual trigger
    requested_worker TEXT,
    -- publication: the partition is written before the send (ledger), the offset after delivery
    lease_epoch   BIGINT,
    partition     INT,
    "offset"      BIGINT,
    routed_worker TEXT,
    published_at  TIMESTAMPTZ,
    -- execution, from the worker's result events
    worker_id     TEXT,
    worker_group  TEXT,
    started_at    TIMESTAMPTZ,
    finished_at   TIMESTAMPTZ,
    message       TEXT,
    log           TEXT,
    parent_id     BIGINT,
    created_at    TIMESTAMPTZ NOT NULL DEFAULT now(),
    updated_at    TIMESTAMPTZ NOT NULL DEFAULT now()
);

-- A scheduled fire time of a job exists once (per broadcast shard): G2 starts here.
CREATE UNIQUE INDEX triggers_job_fire_time ON triggers (job_id, fire_time, shard_index)
    WHERE kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire');
CREATE INDEX triggers_job ON triggers (job_id, id DESC);
CREATE INDEX triggers_pending ON triggers (shard, fire_time)
    WHERE status IN ('scheduled', 'publishing');
-- Rows change status several times within seconds of being written: keep the planner's
-- statistics fresh so batched updates by id stay index lookups.
ALTER TABLE triggers SET (autovacuum_analyze_scale_factor = 0.01, autovacuum_vacuum_scale_factor = 0.02);

-- One row per shard; see ARCHITECTURE.md "Shards and leases".
CREATE TABLE scheduler_lease (
    shard      INT PRIMARY KEY,
    holder     TEXT,
    epoch      BIGINT NOT NULL DEFAULT 0,
    expires_at TIMESTAMPTZ NOT NULL DEFAULT 'epoch'
);

-- Workers as last seen in their heartbeats.
CREATE TABLE workers (
    worker_id    TEXT PRIMARY KEY,
    worker_group TEXT NOT NULL,
    job_types    TEXT[] NOT NULL,
    assignments  JSONB NOT NULL,
    running      JSONB NOT NULL,
    capacity     INT  NOT NULL,
    version      TEXT NOT NULL,
    started_at   TIMESTAMPTZ NOT NULL,
    last_seen    TIMESTAMPTZ NOT NULL,
    interval_ms  BIGINT NOT NULL,
    stopped_at   TIMESTAMPTZ
);
