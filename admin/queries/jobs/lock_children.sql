-- Held until the transaction ends: one change of a child list at a time ("cadenza" + 2, a key
-- of its own among the admin's advisory locks).
SELECT pg_advisory_xact_lock(7161115269303787778)
