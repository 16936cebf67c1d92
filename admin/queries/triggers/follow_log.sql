-- Run $1's status as triggers/get shows it (a `publishing` run the delivery record holds is
-- `published`) and its log, for a client following the log.
SELECT CASE WHEN t.status = 'publishing' AND EXISTS (SELECT 1 FROM cadenza_delivery(t.id))
            THEN 'published' ELSE t.status END AS status,
       t.log
FROM triggers t
WHERE t.id = $1
