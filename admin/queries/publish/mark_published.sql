-- Record after delivery, on the database clock, of the runs still `publishing`. A run a worker
-- already started (or finished) is left alone: its `started` or `finished` event recorded its
-- partition, offset and published_at. Ids come sorted, so rows are locked in id order, as the
-- result ingest locks them.
UPDATE triggers t
SET status = 'published', partition = u.partition, "offset" = u.offset,
    published_at = now(), updated_at = now()
FROM UNNEST($1::bigint[], $2::int[], $3::bigint[]) AS u (id, partition, "offset")
WHERE t.id = u.id AND t.status = 'publishing'
