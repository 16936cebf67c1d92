-- The offsets of the runs of job type $1 (of job $4 if given) published with a fire time in
-- [$2, $3), per partition: how a time window maps to topic offsets (the broker's
-- offsets_for_times is not relied on). A run's offset is recorded on its row (a worker's event,
-- or the read-back, wrote it there), in the delivery record (migration 0019), or both: each
-- offset counts once. The record's rows are found by their fire times (deliveries_fire); only
-- for one job are the runs they hold looked up, for their job.
WITH published AS (
    SELECT partition, "offset"
    FROM triggers
    WHERE job_type = $1 AND "offset" IS NOT NULL AND fire_time >= $2 AND fire_time < $3
      AND ($4::bigint IS NULL OR job_id = $4)
    UNION
    SELECT d.partition, u."offset"
    FROM deliveries d
    CROSS JOIN LATERAL UNNEST(d.run_ids, d.offsets, d.fire_times) AS u (run_id, "offset", fire_time)
    WHERE d.job_type = $1 AND d.last_fire >= $2 AND d.first_fire < $3
      AND u.fire_time >= $2 AND u.fire_time < $3
      AND ($4::bigint IS NULL
           OR EXISTS (SELECT 1 FROM triggers t WHERE t.id = u.run_id AND t.job_id = $4))
)
SELECT partition, min("offset") AS from_offset, max("offset") AS to_offset, count(*) AS runs
FROM published
GROUP BY partition
ORDER BY partition
