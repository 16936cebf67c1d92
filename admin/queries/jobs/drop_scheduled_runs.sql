-- Runs of a job's schedule written ahead and not yet taken for sending are dropped when the job
-- changes; the scan writes them again from the job's new definition. Returns the earliest
-- dropped. The job is locked FOR UPDATE by the caller.
-- A run is dropped only when it is due later than $2 ms from now (the longest publish-ahead of
-- the live admins, jobs/taken_window, plus a guard for the holder's clock). One due sooner is kept whatever its status: a run left `scheduled`
-- past its fire time while its shard changed hands is sent late by the next holder, or misfired
-- by the job's rule, rather than lost. For a run written claimed (`publishing`): the holder takes runs
-- for sending under a key-share lock of their job, which the caller's lock waited for, so every
-- run it took is due sooner (a run sent has its offset in the delivery record, not in its row:
-- `"offset" IS NULL` alone does not say it was not sent; the fire-time bound does). Dropping any bumps the job's plan_gen, from which the holder learns
-- to send only the runs still there.
WITH dropped AS (
    DELETE FROM triggers
    WHERE job_id = $1
      AND kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire')
      -- A queued run is released only once due (flow/queue_head): one due later is waiting.
      AND (status IN ('scheduled', 'queued') OR (status = 'publishing' AND "offset" IS NULL))
      AND fire_time > clock_timestamp() + make_interval(secs => $2::float8 / 1000.0)
    RETURNING fire_time, status
),
bumped AS (
    UPDATE jobs SET plan_gen = plan_gen + 1
    WHERE id = $1 AND EXISTS (SELECT 1 FROM dropped WHERE status = 'publishing')
)
SELECT min(fire_time) FROM dropped
