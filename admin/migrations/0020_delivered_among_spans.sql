-- cadenza_delivered_among (migration 0019) looked the given runs up with one range, from the
-- lowest id to the highest: one old run among recent ones (a run delivered hours ago that no
-- worker started, looked up beside the runs of the last seconds) made it read every delivery
-- recorded in between, seconds of work on a busy database. Now the ids are cut into spans
-- wherever two neighbours lie more than 4,096 ids apart, and each span is looked up in the
-- GiST index on its own (a bitmap scan of the spans as an array).
CREATE OR REPLACE FUNCTION cadenza_delivered_among(ids BIGINT[]) RETURNS SETOF BIGINT
LANGUAGE sql STABLE STRICT
SET enable_nestloop = off SET enable_mergejoin = off AS $$
    WITH wanted AS MATERIALIZED (
        SELECT DISTINCT x AS id FROM unnest(ids) AS x
    ),
    spans AS MATERIALIZED (
        SELECT int8range(min(id), max(id), '[]') AS r
        FROM (
            SELECT id, count(*) FILTER (WHERE gap) OVER (ORDER BY id) AS span
            FROM (SELECT id, id - lag(id) OVER (ORDER BY id) > 4096 AS gap FROM wanted) g
        ) s
        GROUP BY span
    ),
    recorded AS MATERIALIZED (
        SELECT unnest(d.run_ids) AS id
        FROM deliveries d
        WHERE d.runs && ANY (ARRAY(SELECT r FROM spans))
    )
    SELECT DISTINCT w.id FROM wanted w JOIN recorded r ON r.id = w.id
$$;
