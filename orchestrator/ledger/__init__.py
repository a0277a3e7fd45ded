"""The ledger of bench runs (SQLite on this machine; the team store's is store/pg_ledger.py)."""
