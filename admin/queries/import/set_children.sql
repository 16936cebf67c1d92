-- Sets the children of a job created by the import in the same transaction, once every job of
-- the import exists.
UPDATE jobs SET children = $2 WHERE id = $1
