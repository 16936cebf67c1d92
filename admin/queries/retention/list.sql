-- The partitions of `triggers`, oldest first, with the time each began receiving runs.
SELECT block, name, starts_at FROM trigger_partitions ORDER BY block
