-- Record after delivery. A fast worker's `started` may already have moved the row on; keep it.
UPDATE triggers t
SET status = CASE WHEN t.status = 'publishing' THEN 'published' ELSE t.status END,
    partition = u.partition, "offset" = u.offset, published_at = u.published_at, updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::bigint[], $4::timestamptz[]) AS u (id, partition, "offset", published_at)
WHERE t.id = u.id
