-- This admin is alive; returns how many admins are (including this one), and the database's
-- clock (the scheduler's time base).
WITH me AS (
    INSERT INTO admins (admin_id) VALUES ($1)
    ON CONFLICT (admin_id) DO UPDATE SET last_seen = now()
)
SELECT 1 + count(*), now() FROM admins
WHERE admin_id <> $1 AND last_seen > now() - make_interval(secs => $2::float8 / 1000.0)
