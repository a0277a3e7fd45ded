"""What stop_leftovers.sh.j2 printed: the benches of dead runs that a new run found (and stopped) in the container."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class LeftoverBench:
    run_id: str
    result_path: str  # where its JSONL would have gone (only the temporary name existed; it is removed)
    stopped: bool  # False: its process had already gone, only its pidfile was left

    def message(self) -> str:
        if self.stopped:
            return (f"stopped a leftover bench of run {self.run_id} (its run died; its partial result "
                    f"{self.result_path}.partial was removed, it is no baseline)")
        return f"removed the pidfile of run {self.run_id}'s bench (the bench had already ended)"


def parse_leftovers(text: str) -> list[LeftoverBench]:
    """`stopped|gone TAB run-id TAB path` lines; anything else is ignored."""
    found = []
    for line in text.splitlines():
        parts = line.split("\t")
        if len(parts) == 3 and parts[0] in ("stopped", "gone") and parts[1]:
            found.append(LeftoverBench(parts[1], parts[2], parts[0] == "stopped"))
    return found
