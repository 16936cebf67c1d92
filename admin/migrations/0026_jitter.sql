-- Jitter: every cron fire time of a job is moved by one offset in [0, jitter_ms) derived from
-- its id (see `schedule::jitter_offset`), so that many jobs of one expression fire apart.
ALTER TABLE jobs ADD COLUMN jitter_ms BIGINT NOT NULL DEFAULT 0
    CHECK (jitter_ms BETWEEN 0 AND 86400000);
