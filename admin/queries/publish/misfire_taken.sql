-- Runs written claimed that were taken for sending later than their job's misfire threshold
-- (publication was behind): recorded `misfired` instead of sent, as the job's misfire strategy
-- says (publish::late_runs). Only those still `publishing` under the epoch they were taken at.
-- Runs after the jobs' check (publish/check_plans), so the rows' locks come after the jobs'.
UPDATE triggers t
SET status = 'misfired', finished_at = now(), updated_at = now(),
    message = 'missed its fire time by more than the misfire threshold (' || u.threshold_ms
              || ' ms) while publication was behind; misfire strategy ' || u.misfire
FROM UNNEST($1::bigint[], $2::bigint[], $3::bigint[], $4::text[]) AS u (id, epoch, threshold_ms, misfire)
WHERE t.id = u.id AND t.status = 'publishing' AND t.lease_epoch = u.epoch
RETURNING t.id
