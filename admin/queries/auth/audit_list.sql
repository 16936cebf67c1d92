-- Audit rows, newest first, filtered; $7: LIKE patterns of the job types the caller may see
-- (NULL: every row; otherwise only rows about jobs of those types).
SELECT id, at, actor, user_id, source, action, outcome, job_id, job_type, target, before, after,
       detail
FROM audit
WHERE ($1::text IS NULL OR actor = $1)
  AND ($2::bigint IS NULL OR job_id = $2)
  AND ($3::timestamptz IS NULL OR at >= $3)
  AND ($4::timestamptz IS NULL OR at < $4)
  AND id < $5
  AND ($7::text[] IS NULL OR job_type LIKE ANY($7))
ORDER BY id DESC
LIMIT $6
