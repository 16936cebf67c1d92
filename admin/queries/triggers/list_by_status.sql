-- As triggers/list, for the runs that show status $2 (but `publishing`: triggers/list_publishing).
-- `TRUE /* index */` is replaced by a condition on the run's own row (api::triggers::
-- list_by_status): the stored statuses that can show $2 (a `publishing` run the delivery record
-- holds shows `published`), named as in the partial index that serves them, so that every plan
-- PostgreSQL keeps for the statement can use that index instead of reading every run, and so
-- that the delivery record is looked up only for the runs it leaves.
SELECT t.id, t.job_id, t.job_type, t.kind,
       CASE WHEN d.partition IS NULL THEN t.status ELSE 'published' END AS status,
       t.fire_time, t.params, t.attempt, t.shard_index, t.shard_total, t.route, t.requested_worker,
       t.routed_worker, t.route_note, COALESCE(d.partition, t.partition) AS partition,
       COALESCE(d."offset", t."offset") AS "offset",
       COALESCE(d.acked_at, t.published_at) AS published_at, t.worker_id, t.worker_group,
       t.started_at, t.finished_at, t.message, NULL::text AS log, t.parent_id, t.retry_no,
       t.retry_requested, t.workflow_run_id, t.workflow_node, NULL::jsonb AS output, t.created_at
FROM triggers t
LEFT JOIN LATERAL (
    SELECT * FROM cadenza_delivery(t.id) WHERE t.status = 'publishing' OFFSET 0
) d ON TRUE
WHERE ($1::bigint IS NULL OR t.job_id = $1)
  AND TRUE /* index */
  AND CASE WHEN d.partition IS NULL THEN t.status ELSE 'published' END = $2
  AND t.id < $3
  AND ($5::timestamptz IS NULL OR t.fire_time >= $5)
  AND ($6::timestamptz IS NULL OR t.fire_time < $6)
  AND ($7::text IS NULL OR t.kind = $7)
  AND ($8::text[] IS NULL OR t.job_type LIKE ANY($8))
ORDER BY t.id DESC
LIMIT $4
