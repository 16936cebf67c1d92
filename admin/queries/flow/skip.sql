-- Records the queued runs $1 `skipped`, each with its reason ($2).
UPDATE triggers t
SET status = 'skipped', finished_at = now(), updated_at = now(), message = u.message
FROM UNNEST($1::bigint[], $2::text[]) AS u (id, message)
WHERE t.id = u.id AND t.status = 'queued'
RETURNING t.id
