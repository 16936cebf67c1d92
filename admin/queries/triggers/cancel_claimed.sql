-- A run the scan wrote already claimed (`publishing`, not yet sent) is cancelled like a
-- `scheduled` one while it is due later than $3 ms from now (the longest publish-ahead of the live
-- admins, jobs/taken_window, plus a guard): its
-- holder has not taken it for sending (that bound, not `"offset" IS NULL`, says it was not sent:
-- a run sent has its offset in the delivery record, not in its row). Under a lock of its job ($2), which the holder's take
-- (FOR KEY SHARE) excludes; a job locked right now (any of its runs being taken, or the job
-- being changed) is skipped and the caller answers "try again". Bumps the job's plan_gen, from which the holder learns to send only
-- the runs still there. Returns how many were cancelled (0 or 1).
WITH job AS (
    SELECT id FROM jobs WHERE id = $2 FOR UPDATE SKIP LOCKED
),
cancelled AS (
    UPDATE triggers t
    SET status = 'cancelled', finished_at = now(), message = $4, updated_at = now()
    WHERE t.id = $1 AND t.job_id = $2 AND t.status = 'publishing' AND t."offset" IS NULL
      AND t.fire_time > clock_timestamp() + make_interval(secs => $3::float8 / 1000.0)
      AND EXISTS (SELECT 1 FROM job)
    RETURNING t.id
),
bumped AS (
    UPDATE jobs SET plan_gen = plan_gen + 1
    WHERE id = $2 AND EXISTS (SELECT 1 FROM cancelled)
)
SELECT count(*) FROM cancelled
