"""Local state on this machine: the SQLite ledger of bench runs (ledger.py), automatic VMIDs."""
