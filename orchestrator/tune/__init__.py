"""`deploy tune`: server flags searched under a latency SLO, each point rolled and bracketed (docs/tune.md)."""
