-- An attempt failed: try again after $3 ms, or give up after $4 attempts.
UPDATE alarms
SET last_error = $2,
    status = CASE WHEN attempts >= $4 THEN 'failed' ELSE 'pending' END,
    next_attempt_at = now() + make_interval(secs => $3::float8 / 1000.0)
WHERE id = $1
