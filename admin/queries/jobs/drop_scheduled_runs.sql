-- Runs of a job's schedule written ahead but not yet published are dropped when the job changes;
-- the scan writes them again from the job's new definition. Returns the earliest dropped.
WITH dropped AS (
    DELETE FROM triggers
    WHERE job_id = $1 AND status = 'scheduled'
      AND kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire')
    RETURNING fire_time
)
SELECT min(fire_time) FROM dropped
