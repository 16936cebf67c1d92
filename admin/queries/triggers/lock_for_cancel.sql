-- The run $1 to cancel, locked so that it cannot be marked for sending, started or ended
-- meanwhile, with its status and partition as triggers/get shows them: a `publishing` run the
-- delivery record holds is `published`, on the partition recorded there. The record is written
-- without the run's row: a run whose send is acknowledged while the lock is held is still
-- `publishing` here, which the caller treats as being published.
SELECT CASE WHEN d.partition IS NULL THEN t.status ELSE 'published' END AS status, t.job_id,
       t.job_type, COALESCE(d.partition, t.partition) AS partition
FROM triggers t
LEFT JOIN LATERAL (
    SELECT * FROM cadenza_delivery(t.id) WHERE t.status = 'publishing' OFFSET 0
) d ON TRUE
WHERE t.id = $1
FOR UPDATE OF t
