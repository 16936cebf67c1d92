-- The outputs of the runs $1 (JSON text; NULL for a run without one).
SELECT id, output::text
FROM triggers
WHERE id = ANY($1::bigint[])
