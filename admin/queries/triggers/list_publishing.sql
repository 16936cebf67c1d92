-- As triggers/list_by_status, for the runs that show `publishing`: `publishing` in their row and
-- not in the delivery record. Those were all marked at or after the earliest settled mark ($9,
-- triggers/settled_before; NULL while a shard has none): the runs before it were delivered (and
-- never started by a worker, which can be nearly every run ever sent) or resolved. The runs
-- marked since are read from triggers_pending (by shard, from the mark on) and put newest first before the record is looked
-- up, so that it is looked up only until a page is found (the newest are the runs written ahead,
-- not yet sent) rather than for every run marked since.
SELECT t.id, t.job_id, t.job_type, t.kind,
       CASE WHEN d.partition IS NULL THEN t.status ELSE 'published' END AS status,
       t.fire_time, t.params, t.attempt, t.shard_index, t.shard_total, t.route, t.requested_worker,
       t.routed_worker, t.route_note, COALESCE(d.partition, t.partition) AS partition,
       COALESCE(d."offset", t."offset") AS "offset",
       COALESCE(d.acked_at, t.published_at) AS published_at, t.worker_id, t.worker_group,
       t.started_at, t.finished_at, t.message, NULL::text AS log, t.parent_id, t.retry_no,
       t.retry_requested, t.workflow_run_id, t.workflow_node, NULL::jsonb AS output, t.created_at
FROM (
    SELECT *
    FROM triggers
    WHERE status = 'publishing' AND updated_at >= COALESCE($9::timestamptz, '-infinity')
      AND shard = ANY(ARRAY(SELECT shard FROM scheduler_lease))
      AND ($1::bigint IS NULL OR job_id = $1)
      AND id < $3
      AND ($5::timestamptz IS NULL OR fire_time >= $5)
      AND ($6::timestamptz IS NULL OR fire_time < $6)
      AND ($7::text IS NULL OR kind = $7)
      AND ($8::text[] IS NULL OR job_type LIKE ANY($8))
    ORDER BY id DESC
) t
LEFT JOIN LATERAL (
    SELECT * FROM cadenza_delivery(t.id) WHERE t.status = 'publishing' OFFSET 0
) d ON TRUE
WHERE CASE WHEN d.partition IS NULL THEN t.status ELSE 'published' END = $2
ORDER BY t.id DESC
LIMIT $4
