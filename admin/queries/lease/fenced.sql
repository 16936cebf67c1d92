-- The holder fenced every earlier producer of these shards (at the epochs it holds them).
UPDATE scheduler_lease l
SET fence_txn_ids = '{}'
FROM UNNEST($2::int[], $3::bigint[]) AS mine (shard, epoch)
WHERE l.shard = mine.shard AND l.epoch = mine.epoch AND l.holder = $1
