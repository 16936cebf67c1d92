-- Deletes workflow $1 with its workflow runs and their node rows (the node runs in `triggers`
-- stay, as runs of their jobs). Returns the number of workflows deleted (0 or 1).
WITH gone AS (DELETE FROM workflows WHERE id = $1 RETURNING id)
SELECT count(*) FROM gone
