-- Ledger before send: claim scheduled rows for publication with the partition each goes to and
-- the lease epoch they are sent under. Runs in the transaction that checked the leases of their
-- shards (lease/check, FOR KEY SHARE), so no takeover commits in between. The selector leaves
-- routed_worker NULL exactly when no live worker served the job type: route_note says so, as the
-- code `no_live_worker` (the API words it, api::triggers::ROUTE_NOTE_NO_WORKER).
UPDATE triggers t
SET status = 'publishing', partition = u.partition, routed_worker = u.routed_worker,
    route_note = CASE WHEN u.routed_worker IS NULL
                      THEN 'no_live_worker'
                 END,
    lease_epoch = u.epoch, updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::text[], $4::bigint[]) AS u (id, partition, routed_worker, epoch)
WHERE t.id = u.id AND t.status = 'scheduled'
RETURNING t.id
