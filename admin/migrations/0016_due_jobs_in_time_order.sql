-- The scan's due jobs, in fire-time order across all shards: the scan reads them with a plain
-- ordered index scan that stops after a batch, instead of a bitmap scan of every due entry of
-- the held shards followed by a sort.
--
-- Each advance of a job writes a new row version and a new entry here (next_fire_at is indexed,
-- so the update is never HOT), and the old entry, now dead, has an earlier fire time than any
-- live one: it is inside every later scan's range until vacuum removes it. A bitmap scan reads
-- all of them again on every call, so the scan's cost grew with the time since the last vacuum
-- (at 30,000 triggers/s, about 15,000 dead entries a second). A plain index scan marks the dead
-- entries it meets, and later scans pass over them without reading the table.
CREATE INDEX jobs_due_at ON jobs (next_fire_at, shard) WHERE enabled AND next_fire_at IS NOT NULL;
DROP INDEX jobs_due;
