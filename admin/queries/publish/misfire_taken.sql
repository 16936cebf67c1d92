-- Runs of a schedule taken for sending later than their job's misfire threshold
-- (publication was behind, or the run was left `scheduled` while its shard changed hands), as the
-- job's misfire strategy says: `do_nothing` records each
-- `misfired` instead of sending it; `fire_once_now` records one `misfired` when a later run of
-- the same job and broadcast shard is past the threshold too and not started yet (`scheduled`, or
-- `publishing`: about to be sent, or sent and waiting for a worker), so only the latest
-- goes out (as the sweep's rule, recover/misfire_overdue, keeps the newest), or when it is
-- covered ($5): it was due by the time this admin sent a late run of the same job and broadcast
-- shard as its catch-up (publish::CatchUps). Of the given runs,
-- returns those still `publishing` under the epoch they were taken at, each with whether it was
-- recorded `misfired`; a run not returned is no longer this admin's to send. Runs after the jobs'
-- check (publish/check_plans), so the rows' locks come after the jobs'.
WITH taken AS (
    SELECT t.id,
           u.threshold_ms,
           u.misfire,
           u.misfire = 'do_nothing'
           OR (u.misfire = 'fire_once_now' AND u.covered)
           OR (u.misfire = 'fire_once_now' AND EXISTS (
                   SELECT 1 FROM triggers n
                   WHERE n.job_id = t.job_id AND n.shard_index = t.shard_index
                     AND n.kind IN ('cron', 'fix_rate', 'fix_delay', 'once', 'misfire')
                     AND n.fire_time > t.fire_time
                     AND n.fire_time < now() - make_interval(secs => u.threshold_ms / 1000.0)
                     AND n.status IN ('scheduled', 'publishing')))
           AS late
    FROM triggers t
    JOIN UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::text[], $5::bool[])
         AS u (id, epoch, threshold_ms, misfire, covered) ON t.id = u.id
    WHERE t.status = 'publishing' AND t.lease_epoch = u.epoch
    ORDER BY t.id
    FOR NO KEY UPDATE OF t
),
misfired AS (
    UPDATE triggers t
    SET status = 'misfired', finished_at = now(), updated_at = now(),
        message = 'missed its fire time by more than the misfire threshold (' || taken.threshold_ms
                  || ' ms) when it was taken for sending; misfire strategy ' || taken.misfire
    FROM taken
    WHERE t.id = taken.id AND taken.late
    RETURNING t.id
)
SELECT id, late FROM taken
