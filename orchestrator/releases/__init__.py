"""Releases on the target: the documents a release directory holds (documents.py: meta.json,
verdict.json, flags.json), typed; release ids and the scripts that write, activate and read releases (store.py)."""
