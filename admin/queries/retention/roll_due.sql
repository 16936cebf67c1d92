-- Whether the newest partition began receiving runs at least $1 ms ago (time for the next).
SELECT starts_at <= now() - make_interval(secs => $1::float8 / 1000.0)
FROM trigger_partitions
ORDER BY block DESC
LIMIT 1
