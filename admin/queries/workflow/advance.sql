-- Moves a workflow's next_fire_at past what was just fired; a `once` workflow disables itself.
UPDATE workflows
SET next_fire_at = $2, enabled = $3, updated_at = now()
WHERE id = $1
