-- Runs written claimed whose route no longer held when they were taken (their worker stopped,
-- went silent or lost the partition, or the strategy chooses another worker now): the route
-- they are sent on, for those still there and still marked under the epoch they were written
-- under (a job change may have dropped some). Runs after the jobs' check (publish/check_plans),
-- so the rows' locks come after the jobs'.
UPDATE triggers t
SET partition = u.partition, routed_worker = u.routed_worker,
    route_note = CASE WHEN u.routed_worker IS NULL
                      THEN 'no_live_worker'
                 END,
    updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::text[], $4::bigint[]) AS u (id, partition, routed_worker, epoch)
WHERE t.id = u.id AND t.status = 'publishing' AND t.lease_epoch = u.epoch
RETURNING t.id
