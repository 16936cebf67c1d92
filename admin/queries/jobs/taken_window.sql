-- The longest publish-ahead, in ms, of the admins alive now (seen within their lease TTL), at
-- least $1 (the asking admin's own): how far ahead of its fire time a run written ahead may
-- already have been taken for sending by the holder of its shard. An admin whose last round is
-- older than its lease TTL holds no lease, so it sends nothing it took.
SELECT GREATEST($1::bigint, COALESCE(max(publish_ahead_ms), 0))
FROM admins
WHERE last_seen > now() - make_interval(secs => lease_ttl_ms::float8 / 1000.0)
