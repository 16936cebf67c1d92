-- Record after delivery, on the database clock. A fast worker's `started` may already have
-- moved the row on; keep its status then.
UPDATE triggers t
SET status = CASE WHEN t.status = 'publishing' THEN 'published' ELSE t.status END,
    partition = u.partition, "offset" = u.offset, published_at = now(), updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::bigint[]) AS u (id, partition, "offset")
WHERE t.id = u.id
