-- A workflow run of workflow $1 (kind $2, fire time $3, status $4, its nodes $5) with one
-- `waiting` row per node ($6). A fire time of the schedule that has a run already gets none
-- (unique index workflow_runs_fire): the result is then empty.
WITH w AS (
    INSERT INTO workflow_runs (workflow_id, kind, fire_time, status, nodes, message, requested_by,
                               finished_at)
    VALUES ($1, $2, $3, $4, $5::jsonb, $7, $8, CASE WHEN $4 = 'running' THEN NULL ELSE now() END)
    ON CONFLICT DO NOTHING
    RETURNING id
),
n AS (
    INSERT INTO workflow_run_nodes (workflow_run_id, node, status)
    SELECT w.id, k.node, CASE WHEN $4 = 'running' THEN 'waiting' ELSE 'skipped' END
    FROM w CROSS JOIN UNNEST($6::text[]) AS k (node)
)
SELECT id FROM w
