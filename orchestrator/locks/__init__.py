"""Locks around a host: the lease on the target (lease.py), this machine's claims per host (claims.py) and its live
runs, whose death it can prove (local_runs.py)."""
