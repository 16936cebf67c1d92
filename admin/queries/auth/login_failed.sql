-- Counts a sign-in attempt against each key before its password is checked (a success takes it
-- back); a key quiet for an hour starts over.
UPDATE login_failures SET
    failures = CASE WHEN last_at < now() - interval '1 hour' THEN 1 ELSE failures + 1 END,
    last_at = now()
WHERE key = ANY($1)
