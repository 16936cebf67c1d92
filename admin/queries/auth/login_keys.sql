-- Makes sure each throttle key ($1, sorted) has a row to lock, with nothing counted yet.
INSERT INTO login_failures (key, failures, last_at)
SELECT k, 0, now() FROM unnest($1::text[]) AS k ORDER BY k
ON CONFLICT (key) DO NOTHING
