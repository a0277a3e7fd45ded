"""This machine and this process: state paths, private files, YAML and code caches, crash reports, signals."""
