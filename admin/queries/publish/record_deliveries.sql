-- The delivery record of one recorder round: the runs the broker acknowledged (id, offset, fire
-- time, acknowledgement time by the database clock as the admin reads it), one row per job type
-- and partition, in offset order. The runs' rows are not written: a run still `publishing` that
-- a delivery row holds was published (migration 0019).
--
-- The admin groups and orders the runs itself: $1..$7 describe each row (job type, partition,
-- smallest and largest run id, first and last fire time, last offset), $8/$9 where its runs lie
-- in the flat arrays $10..$13 (1-based, inclusive), which hold every row's runs one row after
-- another, each in offset order. Sorting and aggregating them here took most of the statement's
-- time.
INSERT INTO deliveries (job_type, partition, runs, first_fire, last_fire, last_offset, run_ids,
                        offsets, fire_times, acked_at)
SELECT g.job_type, g.partition, int8range(g.lo, g.hi, '[]'), g.first_fire, g.last_fire,
       g.last_offset, ($10::bigint[])[g.s:g.e], ($11::bigint[])[g.s:g.e],
       ($12::timestamptz[])[g.s:g.e], ($13::timestamptz[])[g.s:g.e]
FROM UNNEST($1::text[], $2::int[], $3::bigint[], $4::bigint[], $5::timestamptz[],
            $6::timestamptz[], $7::bigint[], $8::int[], $9::int[])
     AS g (job_type, partition, lo, hi, first_fire, last_fire, last_offset, s, e)
