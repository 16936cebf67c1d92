-- The user behind a personal API token that is neither revoked nor expired; notes its use (at
-- most once a minute, so a busy client does not write on every request).
WITH hit AS (
    SELECT t.id, t.user_id, u.name, u.role, u.job_types
    FROM api_tokens t
    JOIN users u ON u.id = t.user_id
    WHERE t.hash = $1
      AND t.revoked_at IS NULL
      AND (t.expires_at IS NULL OR t.expires_at > now())
), touched AS (
    UPDATE api_tokens SET last_used_at = now()
    WHERE id IN (SELECT id FROM hit)
      AND (last_used_at IS NULL OR last_used_at < now() - interval '1 minute')
)
SELECT user_id, name, role, job_types, id::text AS extra FROM hit
