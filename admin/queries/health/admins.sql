-- Admins seen within the last hour, with the shards each holds now and its publication figures
-- of the last minute, and how far ahead of their fire time it takes runs for sending. An admin is
-- alive while its last lease round is younger than its lease TTL.
SELECT a.admin_id, a.started_at, a.last_seen,
       a.last_seen > now() - make_interval(secs => a.lease_ttl_ms::float8 / 1000.0) AS alive,
       COALESCE((SELECT array_agg(l.shard ORDER BY l.shard) FROM scheduler_lease l
                 WHERE l.holder = a.admin_id AND l.expires_at > now()), '{}') AS shards,
       a.published_1m, a.lateness_p50_ms, a.lateness_p99_ms, a.lateness_max_ms, a.publish_ahead_ms
FROM admins a
WHERE a.last_seen > now() - interval '1 hour'
ORDER BY a.admin_id
