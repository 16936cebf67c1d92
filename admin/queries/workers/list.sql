-- Live workers and those seen within the last hour. A worker is live while its last heartbeat
-- is younger than the dead timeout ($1 ms) and it has not said goodbye.
SELECT worker_id, worker_group, job_types, assignments, running, capacity, version, started_at,
       last_seen, interval_ms, stopped_at,
       (stopped_at IS NULL AND last_seen > now() - make_interval(secs => $1::float8 / 1000.0)) AS alive
FROM workers
WHERE last_seen > now() - interval '1 hour'
ORDER BY worker_group, worker_id
