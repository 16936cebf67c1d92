-- Runs the scan wrote claimed (`publishing`) that their holder never took for sending go back to
-- `scheduled` as it hands their shards back (still holding them), so the next holder loads them
-- at once instead of reading their partitions back once the lease margin has passed.
-- Compare-and-set on the epoch they were written under. Rows locked elsewhere are skipped (a job
-- change dropping them, or a read-back resolving them), so this never waits on nor deadlocks
-- with them; a skipped run still `publishing` is read back by the next holder.
WITH mine AS (
    SELECT t.id
    FROM triggers t
    JOIN UNNEST($1::bigint[], $2::bigint[]) AS u (id, epoch) ON t.id = u.id
    WHERE t.status = 'publishing' AND t.lease_epoch = u.epoch
    ORDER BY t.id
    FOR UPDATE OF t SKIP LOCKED
)
UPDATE triggers t
SET status = 'scheduled', partition = NULL, routed_worker = NULL, route_note = NULL,
    lease_epoch = NULL, updated_at = now()
FROM mine
WHERE t.id = mine.id
