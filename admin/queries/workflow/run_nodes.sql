-- Where every node of the workflow runs $1 stands, with the status of its latest run (as
-- triggers/get shows it: a `publishing` run the delivery record holds is `published`) and, when
-- $2, that run's output.
SELECT n.workflow_run_id, n.node, n.status, n.run_id, n.tries, n.message, n.started_at,
       n.finished_at,
       CASE WHEN t.status = 'publishing' AND EXISTS (SELECT 1 FROM cadenza_delivery(t.id))
            THEN 'published' ELSE t.status END AS run_status,
       CASE WHEN $2::bool THEN t.output END AS output
FROM workflow_run_nodes n
LEFT JOIN triggers t ON t.id = n.run_id
WHERE n.workflow_run_id = ANY($1::bigint[])
