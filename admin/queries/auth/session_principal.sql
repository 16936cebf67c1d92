-- The user of a session that has not expired, and the session's CSRF token.
SELECT u.id AS user_id, u.name, u.role, u.job_types, s.csrf AS extra
FROM sessions s
JOIN users u ON u.id = s.user_id
WHERE s.hash = $1 AND s.expires_at > now()
