-- The longest publish-ahead, in ms, of the admins that may send now, at least $1 (the asking
-- admin's own): how far ahead of its fire time a run written ahead may already have been taken
-- for sending by the holder of its shard. Those admins are the ones seen within their lease TTL
-- and those holding a lease that has not expired (a renewal may land after a late heartbeat).
SELECT GREATEST($1::bigint, COALESCE(max(publish_ahead_ms), 0))
FROM admins
WHERE last_seen > now() - make_interval(secs => lease_ttl_ms::float8 / 1000.0)
   OR admin_id IN (SELECT holder FROM scheduler_lease WHERE expires_at > now())
