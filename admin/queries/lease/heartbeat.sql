-- This admin is alive; returns how many admins are (including this one), and the database's
-- clock (the scheduler's time base). $2: the lease TTL in ms; $3–$6: triggers published in the
-- last minute and their lateness p50 / p99 / max in ms (the console's scheduler health); $7: how
-- far ahead of their fire time it takes runs for sending, in ms (jobs/taken_window).
WITH me AS (
    INSERT INTO admins (admin_id, lease_ttl_ms, published_1m, lateness_p50_ms, lateness_p99_ms,
                        lateness_max_ms, publish_ahead_ms)
    VALUES ($1, $2::bigint, $3, $4, $5, $6, $7)
    ON CONFLICT (admin_id) DO UPDATE
    SET last_seen = now(), lease_ttl_ms = EXCLUDED.lease_ttl_ms,
        published_1m = EXCLUDED.published_1m, lateness_p50_ms = EXCLUDED.lateness_p50_ms,
        lateness_p99_ms = EXCLUDED.lateness_p99_ms, lateness_max_ms = EXCLUDED.lateness_max_ms,
        publish_ahead_ms = EXCLUDED.publish_ahead_ms
)
SELECT 1 + count(*), now() FROM admins
WHERE admin_id <> $1 AND last_seen > now() - make_interval(secs => $2::float8 / 1000.0)
