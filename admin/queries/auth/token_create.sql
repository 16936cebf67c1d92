-- A personal API token of user $1; $5 seconds until it expires (NULL: never).
INSERT INTO api_tokens (user_id, name, prefix, hash, expires_at)
VALUES ($1, $2, $3, $4, CASE WHEN $5::float8 IS NULL THEN NULL
                             ELSE now() + make_interval(secs => $5) END)
RETURNING id, user_id, name, prefix, created_at, expires_at, revoked_at, last_used_at
