-- Closed spans whose first fire time is past the retention ($1 ms), at most $2 of them.
DELETE FROM misfires
WHERE id IN (SELECT id FROM misfires
             WHERE first_fire < now() - make_interval(secs => $1::float8 / 1000.0)
             ORDER BY id LIMIT $2)
