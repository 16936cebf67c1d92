-- Operations: retries with backoff, child jobs, broadcast groups, lost runs, alarms.

-- Retry backoff: `fixed` waits retry_backoff_ms before every retry; `exponential` waits
-- retry_backoff_ms × 2^(n−1) before retry n, at most retry_backoff_max_ms.
ALTER TABLE jobs ADD COLUMN retry_backoff TEXT NOT NULL DEFAULT 'fixed';
ALTER TABLE jobs ADD COLUMN retry_backoff_max_ms BIGINT NOT NULL DEFAULT 3600000;
-- Alarms on a failed run (failed, timed_out, lost): a webhook URL and e-mail addresses.
ALTER TABLE jobs ADD COLUMN alarm_webhook TEXT;
ALTER TABLE jobs ADD COLUMN alarm_emails TEXT[] NOT NULL DEFAULT '{}';

-- Which retry of its fire a run is (0: the first run). A retry links to the run it retries
-- through parent_id, as a child run links to the run whose success fired it.
ALTER TABLE triggers ADD COLUMN retry_no INT NOT NULL DEFAULT 0;
-- The runs of one `sharding_broadcast` fire (and their retries) share a fire_group; NULL for a
-- fire of one run.
ALTER TABLE triggers ADD COLUMN fire_group BIGINT;
CREATE SEQUENCE triggers_fire_group_seq;
CREATE INDEX triggers_fire_group ON triggers (fire_group) WHERE fire_group IS NOT NULL;
-- A failed run is retried once; a parent run fires each child (shard) once, however often its
-- result is ingested.
CREATE UNIQUE INDEX triggers_one_retry ON triggers (parent_id) WHERE kind = 'retry';
CREATE UNIQUE INDEX triggers_one_child ON triggers (parent_id, job_id, shard_index) WHERE kind = 'child';
CREATE INDEX triggers_parent ON triggers (parent_id) WHERE parent_id IS NOT NULL;
-- The lost-run sweeper reads running runs per shard.
CREATE INDEX triggers_running ON triggers (shard, started_at) WHERE status = 'running';

-- Alarm deliveries (an outbox): written in the transaction that records the failure, delivered
-- by any admin, retried with backoff, never in the scheduler's path.
CREATE TABLE alarms (
    id              BIGSERIAL PRIMARY KEY,
    trigger_id      BIGINT NOT NULL REFERENCES triggers (id) ON DELETE CASCADE,
    job_id          BIGINT NOT NULL,
    channel         TEXT   NOT NULL,            -- webhook | email
    target          TEXT   NOT NULL,            -- URL or address
    status          TEXT   NOT NULL DEFAULT 'pending', -- pending | sent | failed
    attempts        INT    NOT NULL DEFAULT 0,
    next_attempt_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    last_error      TEXT,
    created_at      TIMESTAMPTZ NOT NULL DEFAULT now(),
    sent_at         TIMESTAMPTZ,
    UNIQUE (trigger_id, channel, target)
);
CREATE INDEX alarms_due ON alarms (next_attempt_at) WHERE status = 'pending';

-- Runs not written by the scan (API triggers, retries, child runs, replays) may be due far
-- ahead; the shard's holder loads them into its timer as they come within the look-ahead.
CREATE INDEX triggers_requested ON triggers (shard, fire_time)
    WHERE status = 'scheduled' AND kind IN ('manual', 'api', 'retry', 'child', 'replay');

-- Replays: every request that re-published triggers read back from a topic (audit). Each
-- replayed run has kind `replay`, parent_id = the original run, replay_id = the request.
CREATE TABLE replays (
    id         BIGSERIAL PRIMARY KEY,
    job_type   TEXT    NOT NULL,
    request    JSONB   NOT NULL,
    runs       INT     NOT NULL,
    created_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
ALTER TABLE triggers ADD COLUMN replay_id BIGINT;
-- A time window of a job type maps to topic offsets through the published runs' fire times.
CREATE INDEX triggers_type_fire ON triggers (job_type, fire_time) WHERE "offset" IS NOT NULL;
