-- Deliveries are recorded per batch instead of per run.
--
-- A run of a job's schedule is written once before it is sent (`publishing`, routed, under its
-- shard's lease epoch). Once the broker acknowledged it, the admin used to record it `published`
-- with its offset: a second write of every run, with a new row version and entries in six
-- indexes, about a third of PostgreSQL's time at 40,000 triggers/s. The admin now records what a
-- round of acknowledgements delivered as one row per job type and partition in `deliveries`
-- (the runs' ids, offsets, fire times and acknowledgement times as arrays), and leaves the runs'
-- rows as they are. A run whose row says `publishing` and that a delivery row holds was
-- published: the API shows it so, with its partition and offset from here. A worker's `started`
-- (or `finished`) event still writes the run, with where it was published, as before.
CREATE TABLE deliveries (
    id          BIGSERIAL PRIMARY KEY,
    recorded_at TIMESTAMPTZ NOT NULL DEFAULT now(),
    job_type    TEXT NOT NULL,
    partition   INT NOT NULL,
    -- The smallest and largest run id of the row, to find a run's delivery.
    runs        INT8RANGE NOT NULL,
    first_fire  TIMESTAMPTZ NOT NULL,
    last_fire   TIMESTAMPTZ NOT NULL,
    last_offset BIGINT NOT NULL,
    -- One entry per run, in offset order.
    run_ids     BIGINT[] NOT NULL,
    offsets     BIGINT[] NOT NULL,
    fire_times  TIMESTAMPTZ[] NOT NULL,
    acked_at    TIMESTAMPTZ[] NOT NULL
);
CREATE INDEX deliveries_runs ON deliveries USING gist (runs);
-- The last offset recorded on a partition (read-back start, replay's end).
CREATE INDEX deliveries_partition ON deliveries (job_type, partition, last_offset);
-- Replay of a time window.
CREATE INDEX deliveries_fire ON deliveries (job_type, last_fire);
-- Retention.
CREATE INDEX deliveries_recorded ON deliveries (recorded_at);

-- Where run $1 was published according to the delivery record: partition, offset, and when the
-- broker acknowledged it. No row when the record holds none (not delivered, or recorded on the
-- run's own row). Not inlined (STRICT, ROWS 1): inlined into a statement over many runs, the
-- planner could not estimate the range test and walked the whole record in id order for each.
-- The rows that may hold the run are found by the range index first (OFFSET 0 keeps that apart
-- from the ordering).
CREATE FUNCTION cadenza_delivery(run_id BIGINT)
RETURNS TABLE (partition INT, "offset" BIGINT, acked_at TIMESTAMPTZ)
LANGUAGE sql STABLE STRICT ROWS 1 AS $$
    SELECT c.partition, c.offsets[c.i], c.acked_at[c.i]
    FROM (
        SELECT d.id, d.partition, d.offsets, d.acked_at, array_position(d.run_ids, run_id) AS i
        FROM deliveries d
        WHERE d.runs @> run_id
        OFFSET 0
    ) c
    WHERE c.i IS NOT NULL
    ORDER BY c.id
    LIMIT 1
$$;

-- Which of the runs $1 the delivery record holds, for many runs at a time (the read-back's
-- candidates): the record's rows that may hold them are unnested once into a hash table. Nested
-- loops are ruled out: the planner cannot estimate the arrays' lengths, and a nested loop over
-- two of them costs their product.
CREATE FUNCTION cadenza_delivered_among(ids BIGINT[]) RETURNS SETOF BIGINT
LANGUAGE sql STABLE STRICT
SET enable_nestloop = off SET enable_mergejoin = off AS $$
    WITH wanted AS MATERIALIZED (
        SELECT DISTINCT x AS id FROM unnest(ids) AS x
    ),
    recorded AS MATERIALIZED (
        SELECT unnest(d.run_ids) AS id
        FROM deliveries d
        WHERE d.runs && (SELECT int8range(min(id), max(id), '[]') FROM wanted)
    )
    SELECT DISTINCT w.id FROM wanted w JOIN recorded r ON r.id = w.id
$$;

-- A run's status as the API shows it: `publishing` in its row and held by the delivery record
-- is `published`.
CREATE FUNCTION cadenza_run_status(status TEXT, run_id BIGINT) RETURNS TEXT
LANGUAGE sql STABLE AS $$
    SELECT CASE WHEN status = 'publishing' AND EXISTS (SELECT 1 FROM cadenza_delivery(run_id))
                THEN 'published' ELSE status END
$$;

-- The read-back's lower bound. Every run of the shard still `publishing` that was marked so
-- (updated_at) before `settled_before` has been delivered and recorded in `deliveries`, or
-- resolved: the holder writes it, under its lease epoch, from what it still has in flight.
-- The search for runs left `publishing` starts there instead of at the oldest run of the shard,
-- which would now be the first run ever delivered and not started by a worker.
ALTER TABLE scheduler_lease ADD COLUMN settled_before TIMESTAMPTZ NOT NULL DEFAULT '-infinity';

-- Runs waiting or being sent, found by when they were marked rather than when they fire: the
-- read-back searches each shard from its settled_before on. Delivered runs the workers never
-- started stay in it, before the bound. By shard first: a statement's runs share their mark
-- time, and an index by that time first took a quarter longer to insert into.
DROP INDEX triggers_pending;
CREATE INDEX triggers_pending ON triggers (shard, updated_at)
    WHERE status IN ('scheduled', 'publishing');
