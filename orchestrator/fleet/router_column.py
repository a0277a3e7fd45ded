"""A fleet-roll host's router column: what its drain did and one statement of where it is in the router now.
Pure."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class RouterColumn:
    """A fleet-roll host's router column: what its drain did (a past fact) and ONE statement of where the host
    is in the router now.

    Each later event (the add-back after an interrupted roll, a rollback's re-add, --resume finding it missing)
    replaces `now`; none is appended to an earlier one. Appending made a SIGTERMed roll's column read "left out of
    the router after the failure (add it back once checked); was not in the router: added back, healthy": both
    halves cannot be true at once.
    """

    drained: str = ""
    now: str = ""

    def text(self) -> str:
        return "; ".join(part for part in (self.drained, self.now) if part)


def left_out(*, interrupted: bool) -> str:
    """Out of the router after the host's roll stopped: a failure, or an interruption (Ctrl-C, SIGTERM, SIGHUP:
    the host was not found at fault, so nothing asks the operator to check it)."""
    if interrupted:
        return "out of the router: its roll was interrupted (--resume checks it and adds it back)"
    return "left out of the router after the failure (add it back once checked)"


def added_back(took_s: float, reach: str, *, was_out: str) -> str:
    """Back in the router after the same checks as a roll's add-back. `was_out`: this run's own statement that it
    was out ('' when the router simply did not list it, e.g. at --resume)."""
    how = "checked and added back" if was_out else "was not in the router: added back"
    return f"{how}, healthy after {took_s:.1f} s" + (f"; {reach}" if reach else "")


def after_undo(failed: str, reverted: str | None, restore_error: str | None) -> str:
    """Where a host is after its new release failed the router's checks (`failed`) and was undone: `reverted`
    is the rollback's failure (None: rolled back), `restore_error` the re-add's (None: back in)."""
    if reverted is not None:
        return f"NOT back in the router: {failed}; rolling back failed too: {reverted}"
    if restore_error is not None:
        return f"NOT back in the router: {failed}; rolled back, and still out of the router: {restore_error}"
    return f"failed the router's checks on the new release ({failed}): rolled back to the previous release and " \
           "back in the router"
