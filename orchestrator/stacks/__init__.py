"""A server stack: its definition and lock, its patches, kernel caches and pip index."""
