-- Partitions whose successor began receiving runs more than $1 ms ago: every run in them was
-- created before that, so they are past the retention. Never the newest partition.
SELECT p.block, p.name
FROM trigger_partitions p
JOIN LATERAL (
    SELECT starts_at FROM trigger_partitions n WHERE n.block > p.block ORDER BY n.block LIMIT 1
) next ON true
WHERE next.starts_at < now() - make_interval(secs => $1::float8 / 1000.0)
ORDER BY p.block
