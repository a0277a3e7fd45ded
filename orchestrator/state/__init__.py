"""Local state: the SQLite ledger of bench runs."""
