-- A released run the read-back found on its partition is written `published` in its row
-- (recover/resolve_found): it is in flight until a worker reports its end, so it holds its
-- group's slot like a `scheduled`, `publishing` or `running` one.
DROP INDEX triggers_in_flight;
CREATE INDEX triggers_in_flight ON triggers (queue_key, job_id)
    WHERE queue_key IS NOT NULL AND status IN ('scheduled', 'publishing', 'published', 'running');
