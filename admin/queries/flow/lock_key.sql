-- Serializes release rounds of queue key $1 that no group row stands for (a job's own key).
SELECT now() AS db_now,
       pg_advisory_xact_lock(hashtextextended('cadenza-queue:' || $1, 0))::text AS locked
