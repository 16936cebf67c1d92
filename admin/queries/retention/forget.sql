-- After a partition was dropped: its alarms (trigger ids in [$2, $3)), the delivery record of its
-- runs (rows of runs below $3 only: earlier partitions are gone already), and its record.
WITH a AS (DELETE FROM alarms WHERE trigger_id >= $2 AND trigger_id < $3),
d AS (DELETE FROM deliveries WHERE runs << int8range($3, NULL))
DELETE FROM trigger_partitions WHERE block = $1
