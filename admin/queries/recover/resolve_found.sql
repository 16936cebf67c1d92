-- Runs found on their partition during read-back: they were published. Compare-and-set on the
-- mark the read-back saw (epoch and time), so a run marked again since is left alone.
UPDATE triggers t
SET status = 'published',
    partition = u.partition, "offset" = u.offset, published_at = COALESCE(t.published_at, now()),
    updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::bigint[], $4::bigint[], $5::timestamptz[])
     AS u (id, partition, "offset", epoch, marked_at)
WHERE t.id = u.id AND t.status = 'publishing'
  AND t.lease_epoch IS NOT DISTINCT FROM u.epoch AND t.updated_at = u.marked_at
