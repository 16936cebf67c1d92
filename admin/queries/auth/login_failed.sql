-- Counts a failed sign-in against each key; a key quiet for an hour starts over.
INSERT INTO login_failures (key, failures, last_at)
SELECT k, 1, now() FROM unnest($1::text[]) AS k
ON CONFLICT (key) DO UPDATE SET
    failures = CASE WHEN login_failures.last_at < now() - interval '1 hour' THEN 1
                    ELSE login_failures.failures + 1 END,
    last_at = now()
