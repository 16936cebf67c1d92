-- The queued runs of group $1 in release order: the due ones first, numbered by their place in
-- line (highest priority, then oldest fire time, then id), then those not yet due (no place).
-- Places count every run of the group; only runs of job types matching $3 (NULL: all) are
-- listed, at most $2.
SELECT q.id, q.job_id, q.job_name, q.job_type, q.priority, q.fire_time, q.place
FROM (
    SELECT t.id, t.job_id, j.name AS job_name, t.job_type, COALESCE(t.priority, 0) AS priority,
           t.fire_time, t.fire_time <= now() AS due,
           CASE WHEN t.fire_time <= now() THEN
               row_number() OVER (PARTITION BY t.fire_time <= now()
                                  ORDER BY COALESCE(t.priority, 0) DESC, t.fire_time, t.id)
           END AS place
    FROM triggers t
    JOIN jobs j ON j.id = t.job_id
    WHERE t.queue_key = 'g:' || $1 AND t.status = 'queued'
) q
WHERE ($3::text[] IS NULL OR q.job_type LIKE ANY($3))
ORDER BY q.due DESC, q.priority DESC, q.fire_time, q.id
LIMIT $2
