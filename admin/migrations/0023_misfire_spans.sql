-- Misfires without a row per missed fire time. A fire time the scan finds later than its job's
-- misfire threshold (and does not fire, by the job's misfire strategy) is counted into the job's
-- open span of missed fire times, on the job row the scan updates anyway: the first and last
-- fire time skipped and how many. Every fire time of the job's schedule between the two that
-- has no run was skipped, and `misfire_count` says how many those are.
-- A span is closed into `misfires` once the job has missed nothing for a minute (the
-- maintenance round), or when the next miss falls on another UTC day or an hour after the
-- span began (the scan); closing counts it in the daily reports.
ALTER TABLE jobs
    ADD COLUMN misfire_first TIMESTAMPTZ,
    ADD COLUMN misfire_last TIMESTAMPTZ,
    ADD COLUMN misfire_count BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN misfired_total BIGINT NOT NULL DEFAULT 0;

-- Jobs with an open span (few; the maintenance round and GET /api/misfires read them).
CREATE INDEX jobs_misfire_open ON jobs (misfire_last) WHERE misfire_count > 0;

CREATE TABLE misfires (
    id BIGSERIAL PRIMARY KEY,
    job_id BIGINT NOT NULL,
    job_type TEXT NOT NULL,
    first_fire TIMESTAMPTZ NOT NULL,
    last_fire TIMESTAMPTZ NOT NULL,
    count BIGINT NOT NULL CHECK (count > 0),
    -- The job's misfire strategy and threshold when the span was closed.
    strategy TEXT NOT NULL,
    threshold_ms BIGINT NOT NULL,
    closed_at TIMESTAMPTZ NOT NULL DEFAULT now()
);
CREATE INDEX misfires_job ON misfires (job_id, first_fire);
CREATE INDEX misfires_first_fire ON misfires (first_fire);
