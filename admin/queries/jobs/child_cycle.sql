-- A path from one of the children $2 back to job $1 through the jobs' children, if there is one
-- (setting them would make a cycle); NULL otherwise.
WITH RECURSIVE reach (id, path) AS (
    SELECT c, ARRAY[c] FROM UNNEST($2::bigint[]) AS c
    UNION ALL
    SELECT n, r.path || n
    FROM reach r
    JOIN jobs j ON j.id = r.id
    CROSS JOIN LATERAL UNNEST(j.children) AS n
    WHERE r.id <> $1 AND NOT n = ANY(r.path)
)
SELECT path FROM reach WHERE id = $1 LIMIT 1
