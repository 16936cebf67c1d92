-- Hand shards back: they expire now, so another admin takes them at its next round. With $3
-- (everything this admin sent in them is committed or aborted), its producer is no longer named
-- and the next holder need not fence it; otherwise the next holder fences it (or, without
-- transactions, waits the margin before reading back what this admin might still have in flight).
UPDATE scheduler_lease
SET expires_at = LEAST(expires_at, now()),
    txn_id = CASE WHEN $3 THEN NULL ELSE txn_id END
WHERE holder = $1 AND shard = ANY($2::int[])
