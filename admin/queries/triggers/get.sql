-- Run $1 as the API shows it. A run still `publishing` that the delivery record holds was
-- published (migration 0019): it shows `published`, with the partition, offset and
-- acknowledgement time recorded there. The record is looked up for `publishing` runs only
-- (`OFFSET 0` keeps the status test a one-time filter before the look-up, not a filter after it).
SELECT t.id, t.job_id, t.job_type, t.kind,
       CASE WHEN d.partition IS NULL THEN t.status ELSE 'published' END AS status,
       t.fire_time, t.params, t.attempt, t.shard_index, t.shard_total, t.route, t.requested_worker,
       t.routed_worker, t.route_note, COALESCE(d.partition, t.partition) AS partition,
       COALESCE(d."offset", t."offset") AS "offset",
       COALESCE(d.acked_at, t.published_at) AS published_at, t.worker_id, t.worker_group,
       t.started_at, t.finished_at, t.message, t.log, t.parent_id, t.retry_no, t.retry_requested,
       t.workflow_run_id, t.workflow_node, t.output, t.created_at
FROM triggers t
LEFT JOIN LATERAL (
    SELECT * FROM cadenza_delivery(t.id) WHERE t.status = 'publishing' OFFSET 0
) d ON TRUE
WHERE t.id = $1
