-- Concurrency group $1 (NULL: every group, by name; $2: only those of these shards) with its
-- slots in use, its queue and its jobs.
SELECT g.name, g."limit"::bigint AS "limit", g.rate_per_second, g.rate_burst::bigint AS rate_burst,
       (SELECT count(*) FROM triggers t
        WHERE t.queue_key = 'g:' || g.name AND t.status IN ('scheduled', 'publishing', 'published', 'running'))
           AS in_flight,
       (SELECT count(*) FROM triggers t WHERE t.queue_key = 'g:' || g.name AND t.status = 'queued')
           AS queued,
       (SELECT count(*) FROM jobs j WHERE j.concurrency_group = g.name) AS jobs,
       g.created_at, g.updated_at
FROM concurrency_groups g
WHERE ($1::text IS NULL OR g.name = $1) AND ($2::int[] IS NULL OR g.shard = ANY($2::int[]))
ORDER BY g.name
