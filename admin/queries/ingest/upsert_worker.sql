INSERT INTO workers (worker_id, worker_group, job_types, assignments, running, capacity, version,
                     started_at, last_seen, interval_ms, stopped_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, NULL)
ON CONFLICT (worker_id) DO UPDATE
SET worker_group = EXCLUDED.worker_group, job_types = EXCLUDED.job_types,
    assignments = EXCLUDED.assignments, running = EXCLUDED.running, capacity = EXCLUDED.capacity,
    version = EXCLUDED.version, started_at = EXCLUDED.started_at, last_seen = EXCLUDED.last_seen,
    interval_ms = EXCLUDED.interval_ms, stopped_at = NULL
WHERE workers.last_seen <= EXCLUDED.last_seen
