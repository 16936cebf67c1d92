-- Notes on the published run $1 that $2 asked to cancel it; the worker's verdict replaces it.
UPDATE triggers SET message = 'cancel requested by ' || $2, updated_at = now() WHERE id = $1
