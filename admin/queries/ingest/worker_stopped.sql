UPDATE workers SET stopped_at = now() WHERE worker_id = $1 AND stopped_at IS NULL
