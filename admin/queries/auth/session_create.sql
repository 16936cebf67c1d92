-- A new session of $4 seconds; the user's failed sign-ins ($5) are forgiven and sessions
-- expired a day ago are removed.
WITH cleared AS (
    DELETE FROM login_failures WHERE key = ANY($5)
), purged AS (
    DELETE FROM sessions WHERE expires_at < now() - interval '1 day'
)
INSERT INTO sessions (hash, user_id, csrf, expires_at)
VALUES ($1, $2, $3, now() + make_interval(secs => $4))
RETURNING expires_at
