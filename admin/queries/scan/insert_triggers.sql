-- One row per planned fire time (per broadcast shard: $5 index of $6), copying what the run
-- needs from the job. The shards of one broadcast fire share a new fire_group.
-- A run the scan routed ($7 partition, $8 worker) is written already `publishing` under its
-- shard's lease epoch ($9), checked in this transaction (lease/check, FOR KEY SHARE); the
-- selector leaves the worker NULL exactly when no live worker served the job type, and
-- route_note says so, as the code `no_live_worker` (the API words it).
-- A run of a job in a concurrency group, or with an overlap policy, is written `queued` under
-- its job's queue key and priority (migration 0024), for the releaser.
-- A (job, fire time, shard) that already exists is skipped (unique index triggers_job_fire_time).
WITH p AS (
    SELECT *
    FROM UNNEST($1::bigint[], $2::text[], $3::text[], $4::timestamptz[], $5::int[], $6::int[],
                $7::int[], $8::text[], $9::bigint[])
         AS p (job_id, kind, status, fire_time, shard_index, shard_total, partition, routed_worker,
               lease_epoch)
),
g AS (
    SELECT job_id, fire_time, nextval('triggers_fire_group_seq') AS fire_group
    FROM (SELECT DISTINCT job_id, fire_time FROM p WHERE shard_total > 1) d
)
INSERT INTO triggers (job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms,
                      route, shard_index, shard_total, fire_group, message, finished_at,
                      partition, routed_worker, route_note, lease_epoch, queue_key, priority)
SELECT j.id, j.job_type, j.shard, p.kind, p.status, p.fire_time, j.params, j.block, j.timeout_ms,
       j.route, p.shard_index, p.shard_total, g.fire_group,
       CASE WHEN p.status = 'misfired'
            THEN 'missed its fire time by more than the misfire threshold (' || j.misfire_threshold_ms || ' ms); misfire strategy ' || j.misfire
       END,
       CASE WHEN p.status = 'misfired' THEN now() END,
       p.partition, p.routed_worker,
       CASE WHEN p.status = 'publishing' AND p.routed_worker IS NULL
            THEN 'no_live_worker'
       END,
       p.lease_epoch,
       CASE WHEN p.status = 'queued'
            THEN cadenza_queue_key(j.id, j.concurrency_group, j.overlap)
       END,
       CASE WHEN p.status = 'queued' THEN j.priority END
FROM p
JOIN jobs j ON j.id = p.job_id
LEFT JOIN g ON g.job_id = p.job_id AND g.fire_time = p.fire_time
ON CONFLICT DO NOTHING
RETURNING id, job_id, job_type, shard, kind, status, fire_time, params, block, timeout_ms, attempt,
          shard_index, shard_total, route, requested_worker, partition, routed_worker, lease_epoch
