-- Deletes a job (its runs go with it) and removes it from other jobs' children. Returns the
-- number of jobs deleted (0 or 1).
WITH gone AS (DELETE FROM jobs WHERE id = $1 RETURNING id),
unlinked AS (
    UPDATE jobs SET children = array_remove(children, $1), updated_at = now()
    WHERE $1 = ANY(children) AND EXISTS (SELECT 1 FROM gone)
    RETURNING id
)
SELECT count(*) FROM gone
