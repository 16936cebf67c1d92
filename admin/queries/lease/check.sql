-- Inside a scheduling transaction: the shards still held by $1 at the given epochs, with their
-- epoch. FOR KEY SHARE keeps a concurrent takeover from committing until this transaction ends
-- (acquire.sql locks FOR UPDATE SKIP LOCKED: it passes over the shard this round), and lets the
-- holder's own renewal and hand-back (UPDATEs of expires_at, which lock FOR NO KEY UPDATE) go on
-- meanwhile.
SELECT l.shard, l.epoch
FROM scheduler_lease l
JOIN UNNEST($2::int[], $3::bigint[]) AS mine (shard, epoch) ON mine.shard = l.shard
WHERE l.holder = $1 AND l.epoch = mine.epoch AND l.expires_at > now()
FOR KEY SHARE OF l
