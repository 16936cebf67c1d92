-- Tokens of user $1 (NULL: everyone's), newest first; never their digests.
SELECT id, user_id, name, prefix, created_at, expires_at, revoked_at, last_used_at
FROM api_tokens
WHERE $1::bigint IS NULL OR user_id = $1
ORDER BY id DESC
