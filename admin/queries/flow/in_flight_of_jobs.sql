-- The runs in flight of the jobs $1 in key $2 not yet asked to cancel (overlap policy
-- cancel_other), locked, with their status and partition as triggers/lock_for_cancel reads them.
SELECT t.id, CASE WHEN d.partition IS NULL THEN t.status ELSE 'published' END AS status,
       t.job_id, t.job_type, COALESCE(d.partition, t.partition) AS partition
FROM triggers t
LEFT JOIN LATERAL (
    SELECT * FROM cadenza_delivery(t.id) WHERE t.status = 'publishing' OFFSET 0
) d ON TRUE
WHERE t.queue_key = $2 AND t.job_id = ANY($1::bigint[])
  AND t.status IN ('scheduled', 'publishing', 'published', 'running')
  AND t.cancel_requested_at IS NULL
FOR UPDATE OF t
