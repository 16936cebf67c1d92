-- Revokes token $1 if it belongs to user $2 (NULL: any user's); revoking twice keeps the first
-- time.
UPDATE api_tokens SET revoked_at = COALESCE(revoked_at, now())
WHERE id = $1 AND ($2::bigint IS NULL OR user_id = $2)
RETURNING id, user_id, name, prefix, created_at, expires_at, revoked_at, last_used_at
