-- Of the given shards (held at the given epochs), those where a run marked `publishing` under an
-- earlier epoch (or none) after the shard's settled mark is neither delivered nor resolved yet:
-- until the read-back has resolved them, the new holder leaves the mark where it is. Earlier
-- holders marked their runs before the new one acquired the shard ($3, per shard), so
-- triggers_pending is read for each shard from its mark to then.
WITH mine AS (
    SELECT u.shard, u.epoch, u.until, l.settled_before
    FROM UNNEST($1::int[], $2::bigint[], $3::timestamptz[]) AS u (shard, epoch, until)
    JOIN scheduler_lease l ON l.shard = u.shard
),
found AS MATERIALIZED (
    SELECT t.id, t.shard, t.updated_at, t.lease_epoch
    FROM triggers t
    WHERE t.status IN ('scheduled', 'publishing')
      AND t.shard = ANY($1::int[])
      AND t.updated_at >= (SELECT min(settled_before) FROM mine)
      AND t.updated_at < (SELECT max(until) FROM mine)
      AND t.status = 'publishing'
),
earlier AS MATERIALIZED (
    SELECT f.id, f.shard
    FROM found f
    JOIN mine ON mine.shard = f.shard
    WHERE f.updated_at >= mine.settled_before AND f.updated_at < mine.until
      AND (f.lease_epoch IS NULL OR f.lease_epoch < mine.epoch)
),
delivered AS MATERIALIZED (
    SELECT cadenza_delivered_among(ARRAY(SELECT id FROM earlier)) AS id
)
SELECT DISTINCT e.shard
FROM earlier e
WHERE NOT EXISTS (SELECT 1 FROM delivered d WHERE d.id = e.id)
