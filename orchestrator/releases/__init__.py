"""Releases on the target: the documents a release directory holds (meta.json, verdict.json, flags.json), typed."""
