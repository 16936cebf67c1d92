-- The runs run $1 caused (its retry, the runs of its children), oldest first, with their status
-- as triggers/get shows it (a `publishing` run the delivery record holds is `published`).
SELECT t.id, t.job_id, t.kind,
       CASE WHEN t.status = 'publishing' AND EXISTS (SELECT 1 FROM cadenza_delivery(t.id))
            THEN 'published' ELSE t.status END AS status
FROM triggers t
WHERE t.parent_id = $1
ORDER BY t.id
LIMIT 1000
