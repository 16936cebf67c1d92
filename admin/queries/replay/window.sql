-- The offsets of the runs of job type $1 (of job $4 if given) published with a fire time in
-- [$2, $3), per partition: how a time window maps to topic offsets (the broker's
-- offsets_for_times is not relied on).
SELECT partition, min("offset") AS from_offset, max("offset") AS to_offset, count(*) AS runs
FROM triggers
WHERE job_type = $1 AND "offset" IS NOT NULL AND fire_time >= $2 AND fire_time < $3
  AND ($4::bigint IS NULL OR job_id = $4)
GROUP BY partition
ORDER BY partition
