-- Child jobs to fire for the succeeded runs among $1: for a run of one, right away (parent: the
-- run); for a `sharding_broadcast` fire, once every shard has a succeeded run (parent: the
-- fire's first run, so the fire's children are fired once whichever shard finishes last).
-- Disabled child jobs do not fire, and neither do the children of a workflow node's run (the
-- workflow says what runs next).
WITH done AS (
    SELECT id, job_id, shard_total, fire_group
    FROM triggers
    WHERE id = ANY($1::bigint[]) AND status = 'succeeded' AND workflow_run_id IS NULL
),
parents AS (
    SELECT id AS parent_id, job_id FROM done WHERE fire_group IS NULL
    UNION
    SELECT min(s.id), d.job_id
    FROM (SELECT DISTINCT fire_group, job_id, shard_total FROM done WHERE fire_group IS NOT NULL) d
    JOIN triggers s ON s.fire_group = d.fire_group
    GROUP BY d.fire_group, d.job_id, d.shard_total
    HAVING count(DISTINCT s.shard_index) FILTER (WHERE s.status = 'succeeded') = d.shard_total
)
SELECT p.parent_id, c.id AS job_id, c.route, c.job_type
FROM parents p
JOIN jobs j ON j.id = p.job_id
CROSS JOIN LATERAL UNNEST(j.children) AS ch (id)
JOIN jobs c ON c.id = ch.id AND c.enabled
ORDER BY p.parent_id, c.id
