-- Serialises the "did every shard of this broadcast fire succeed?" check of concurrent ingests:
-- locks the first run of each fire group of the succeeded runs $1, in id order.
SELECT id FROM triggers
WHERE id IN (
    SELECT min(g.id)
    FROM triggers g
    WHERE g.fire_group IN (SELECT fire_group FROM triggers
                           WHERE id = ANY($1::bigint[]) AND status = 'succeeded'
                             AND fire_group IS NOT NULL)
    GROUP BY g.fire_group
)
ORDER BY id
FOR UPDATE
