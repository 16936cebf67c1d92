-- Where queued run $1 stands: its queue key, whether it is due, how many due queued runs of
-- the key go before it in release order (highest priority, then oldest fire time, then id),
-- the key's runs in flight, and its group's limit (NULL for a job's own key) and its job's
-- overlap policy. No row when the run is not queued.
SELECT r.queue_key, r.fire_time <= now() AS due,
       (SELECT count(*) FROM triggers o
        WHERE o.queue_key = r.queue_key AND o.status = 'queued' AND o.fire_time <= now()
          AND (COALESCE(o.priority, 0) > COALESCE(r.priority, 0)
               OR (COALESCE(o.priority, 0) = COALESCE(r.priority, 0)
                   AND (o.fire_time, o.id) < (r.fire_time, r.id)))) AS ahead,
       (SELECT count(*) FROM triggers f
        WHERE f.queue_key = r.queue_key
          AND f.status IN ('scheduled', 'publishing', 'published', 'running')) AS in_flight,
       g."limit"::bigint AS "limit", j.overlap
FROM triggers r
JOIN jobs j ON j.id = r.job_id
LEFT JOIN concurrency_groups g ON r.queue_key = 'g:' || g.name
WHERE r.id = $1 AND r.status = 'queued' AND r.queue_key IS NOT NULL
