-- Where to start reading a partition back: after the last trigger recorded on it before the
-- earliest of the unresolved runs was marked `publishing` (anything those sends wrote lands after),
-- on a run's row or in the delivery record. The bound is a database time no earlier than when
-- the offset was recorded, which came after its delivery (published_at is the admin's or a
-- worker's estimate of when it was sent, for people, and may be earlier than the database's
-- clock).
SELECT GREATEST(
    (SELECT max("offset") FROM triggers
     WHERE job_type = $1 AND partition = $2 AND "offset" IS NOT NULL AND updated_at < $3),
    (SELECT max(last_offset) FROM deliveries
     WHERE job_type = $1 AND partition = $2 AND recorded_at < $3)
) + 1
