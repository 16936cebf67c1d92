-- Transactional publication: the producer a lease's holder publishes through, and the producers
-- of earlier holders that the holder must fence before it reads back what they left.
-- txn_id is NULL when the holder publishes without transactions, and once it has handed the
-- shard back with everything it sent decided (committed or aborted). fence_txn_ids gathers the
-- txn_id of every holder that lost the shard without handing it back, until a holder fenced
-- them all.
ALTER TABLE scheduler_lease
    ADD COLUMN txn_id TEXT,
    ADD COLUMN fence_txn_ids TEXT[] NOT NULL DEFAULT '{}';
