-- Held until the transaction ends: one XXL-JOB import at a time ("cadenza" + 3, a key of its own
-- among the admin's advisory locks), so two imports of the same rows cannot both create them.
SELECT pg_advisory_xact_lock(7161115269303787779)
