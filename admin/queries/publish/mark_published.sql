-- Record after delivery, on the database clock, of the runs still `publishing` under the epoch
-- they were sent under: partition, offset, and published_at = when the broker acknowledged
-- each (the admin's reading of the database clock). A run a worker already started (or
-- finished) is left alone: its `started` or `finished` event recorded where it was published. A
-- row locked by another transaction (the result ingest starting it, a cancel) is skipped, not
-- waited for, so this never deadlocks with them; if it is still `publishing` afterwards, the
-- read-back records it.
WITH free AS (
    SELECT id FROM triggers
    WHERE id = ANY($1::bigint[]) AND status = 'publishing'
    ORDER BY id
    FOR UPDATE SKIP LOCKED
)
UPDATE triggers t
SET status = 'published', partition = u.partition, "offset" = u.offset,
    published_at = u.acked_at, updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::bigint[], $4::bigint[], $5::timestamptz[])
     AS u (id, partition, "offset", epoch, acked_at)
WHERE t.id = u.id AND t.id IN (SELECT id FROM free) AND t.lease_epoch = u.epoch
