-- After a partition was dropped: its alarms (trigger ids in [$2, $3)) and its record.
WITH a AS (DELETE FROM alarms WHERE trigger_id >= $2 AND trigger_id < $3)
DELETE FROM trigger_partitions WHERE block = $1
