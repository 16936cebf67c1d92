-- The database's clock (the transaction's start).
SELECT now()
