-- Failed-sign-in counts quiet for an hour (they would start over at the next attempt anyway),
-- at most $1 per round.
DELETE FROM login_failures
WHERE key IN (
    SELECT key FROM login_failures
    WHERE last_at < now() - interval '1 hour'
    LIMIT $1
)
