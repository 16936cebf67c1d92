-- The holder's settled marks of its shards (see migration 0019): for each shard held at the
-- given epoch, every run it marked `publishing` before $3 has its delivery recorded or was
-- resolved. Written only under the holder's lease epoch, while the lease lasts; a mark never
-- moves back.
UPDATE scheduler_lease l
SET settled_before = u.settled_before
FROM UNNEST($1::int[], $2::bigint[], $3::timestamptz[]) AS u (shard, epoch, settled_before)
WHERE l.shard = u.shard AND l.holder = $4 AND l.epoch = u.epoch AND l.expires_at > now()
  AND l.settled_before < u.settled_before
