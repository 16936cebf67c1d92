-- Durations are bounded (366 days = 31 622 400 000 ms) so that no arithmetic on fire times can
-- overflow, in the admin or in SQL (`make_interval`, `timeout_ms + grace`). The API refuses
-- larger values; these constraints refuse them from any other writer too. Values stored before
-- the bound existed are brought down to it first.
UPDATE jobs SET misfire_threshold_ms = 31622400000 WHERE misfire_threshold_ms > 31622400000;
UPDATE jobs SET timeout_ms = 31622400000 WHERE timeout_ms > 31622400000;
ALTER TABLE jobs
    ADD CONSTRAINT jobs_misfire_threshold_bounded
        CHECK (misfire_threshold_ms BETWEEN 0 AND 31622400000),
    ADD CONSTRAINT jobs_timeout_bounded CHECK (timeout_ms BETWEEN 0 AND 31622400000);

-- A handler may ask for its failed run to be retried (`Outcome::Retry`); the run record says so.
ALTER TABLE triggers ADD COLUMN retry_requested BOOLEAN NOT NULL DEFAULT false;
