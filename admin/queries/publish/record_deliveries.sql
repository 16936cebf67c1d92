-- The delivery record of one recorder round: the runs the broker acknowledged (id, job type,
-- partition, offset, fire time, acknowledgement time by the database clock as the admin reads
-- it), one row per job type and partition, in offset order. The runs' rows are not written: a
-- run still `publishing` that a delivery row holds was published (migration 0019).
INSERT INTO deliveries (job_type, partition, runs, first_fire, last_fire, last_offset, run_ids,
                        offsets, fire_times, acked_at)
SELECT u.job_type, u.partition, int8range(min(u.id), max(u.id), '[]'), min(u.fire_time),
       max(u.fire_time), max(u."offset"), array_agg(u.id ORDER BY u."offset"),
       array_agg(u."offset" ORDER BY u."offset"), array_agg(u.fire_time ORDER BY u."offset"),
       array_agg(u.acked_at ORDER BY u."offset")
FROM UNNEST($1::bigint[], $2::text[], $3::int[], $4::bigint[], $5::timestamptz[],
            $6::timestamptz[]) AS u (id, job_type, partition, "offset", fire_time, acked_at)
GROUP BY u.job_type, u.partition
