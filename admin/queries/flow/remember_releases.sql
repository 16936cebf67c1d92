-- The group's release times worth keeping for its rate ($2), after a round.
UPDATE concurrency_groups SET released_recent = $2::timestamptz[] WHERE name = $1
