-- Runs found on their partition during read-back: they were published.
UPDATE triggers t
SET status = CASE WHEN t.status = 'publishing' THEN 'published' ELSE t.status END,
    partition = u.partition, "offset" = u.offset, published_at = COALESCE(t.published_at, now()),
    updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::bigint[]) AS u (id, partition, "offset")
WHERE t.id = u.id AND t.status = 'publishing'
