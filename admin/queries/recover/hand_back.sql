-- Runs the scan wrote claimed (`publishing`) that their holder never took for sending go back to
-- `scheduled` as it hands their shards back (still holding them), so the next holder loads them
-- at once instead of reading their partitions back once the lease margin has passed.
-- Compare-and-set on the epoch they were written under.
UPDATE triggers t
SET status = 'scheduled', partition = NULL, routed_worker = NULL, route_note = NULL,
    lease_epoch = NULL, updated_at = now()
FROM UNNEST($1::bigint[], $2::bigint[]) AS u (id, epoch)
WHERE t.id = u.id AND t.status = 'publishing' AND t.lease_epoch = u.epoch
