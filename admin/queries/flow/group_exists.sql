-- Whether a concurrency group is named $1.
SELECT EXISTS (SELECT 1 FROM concurrency_groups WHERE name = $1)
