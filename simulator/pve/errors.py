"""PVE's API error, in a module of its own: every simulated tool raises or catches it, and the hot ones (`pct exec`,
`pct push`) must not pay for importing the container logic to do so."""

from __future__ import annotations


class PveError(Exception):
    """An API error: HTTP status + message (PVE's `die` text), optionally a per-parameter error map."""

    def __init__(self, message: str, status: int = 500):
        super().__init__(message)
        self.status = status
        self.message = message
