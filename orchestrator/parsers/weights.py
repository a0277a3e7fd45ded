"""What the weights check (orchestrator/scripts/weights_check.sh.j2) found at the model path.

Why: `hf download` writes the small files (config.json first) and deletes a partial file when it fails, so a
directory with config.json can lack every shard. Weights count as complete only against a list of every file:
deploy's record of a finished download (the hub's file list with sizes), or, for a directory the operator filled,
the shards model.safetensors.index.json names.
"""

from __future__ import annotations

from dataclasses import dataclass, field

#: Where deploy records a finished download, relative to the model path (beside hf's own .cache/huggingface).
RECORD_PATH = ".cache/deploy/weights.tsv"


@dataclass(frozen=True)
class MissingFile:
    path: str
    have: int | None  # bytes on disk; None: absent
    want: int | None  # bytes the record lists; None: only its presence is known

    def describe(self) -> str:
        if self.have is None:
            return self.path
        return f"{self.path} ({self.have} of {self.want} bytes)"


@dataclass(frozen=True)
class WeightsState:
    #: deploy (a recorded download), index (model.safetensors.index.json), config (config.json only), none
    record: str
    repo: str = ""
    commit: str = ""
    missing: list[MissingFile] = field(default_factory=list)

    @property
    def complete(self) -> bool:
        """Every listed file is there (with its size, where the list has sizes)."""
        return self.record != "none" and not self.missing

    @property
    def recorded(self) -> bool:
        """A download deploy checked against the hub's file list, every file there with its size."""
        return self.record == "deploy" and not self.missing

    def missing_summary(self, most: int = 6) -> str:
        names = [m.describe() for m in self.missing[:most]]
        more = len(self.missing) - most
        return ", ".join(names) + (f" and {more} more" if more > 0 else "")


def _size(text: str) -> int | None:
    return int(text) if text.isdigit() else None


def parse_weights_check(text: str) -> WeightsState:
    """The check's output; anything unreadable (no output, the container's shell failed) is `none`."""
    record, repo, commit = "none", "", ""
    missing: list[MissingFile] = []
    for line in text.splitlines():
        parts = line.split("\t")
        if parts[0] == "record" and len(parts) >= 2:
            record = parts[1]
            if len(parts) >= 4:
                repo, commit = parts[2], parts[3]
        elif parts[0] == "missing" and len(parts) == 4:
            missing.append(MissingFile(parts[1], _size(parts[2]), _size(parts[3])))
    return WeightsState(record, repo, commit, missing)


#: What `No space left on device` looks like in a failed download's output (Python's OSError, shell tools).
_ENOSPC_MARKS = ("No space left on device", "[Errno 28]")
#: What hf_xet's errors say (xet-core's error chain, raised by huggingface_hub's `xet_get` as RuntimeError): the
#: Xet transfer from the hub's storage (its CAS and the xorb URLs it hands out) failed, not the hub's own API.
_XET_MARKS = ("CAS Client Error", "File reconstruction error", "Xet storage error")


@dataclass(frozen=True)
class HubRefusal:
    """The hub's answer to the weights probe (`hub-refused` line): its X-Error-Code ("-" for none), HTTP status."""

    code: str
    status: str
    message: str


@dataclass(frozen=True)
class DiskSpace:
    """The filesystem under the model path after a failed download: its `df -Ph` line, free bytes, what is left."""

    df_line: str
    free_bytes: int
    need_bytes: int
    files: int


@dataclass(frozen=True)
class DownloadOutput:
    """What the weights download command printed besides `hf`'s own progress."""

    hub_client: str = ""  # the huggingface_hub version the download ran with
    refusal: HubRefusal | None = None
    disk: DiskSpace | None = None
    enospc: bool = False
    #: hf_xet's error line when the Xet transfer failed ("" otherwise)
    xet_error: str = ""

    @property
    def disk_full(self) -> bool:
        """The disk, not the hub, stopped the download: a write failed with ENOSPC, or the rest cannot fit."""
        return self.disk is not None and (self.enospc or self.disk.free_bytes < self.disk.need_bytes)


def parse_download_output(text: str) -> DownloadOutput:
    """The probe's and the command's marker lines (weights_probe.py, steps/software.hf_download_command)."""
    client, refusal, df_line, disk = "", None, "", None
    for line in text.splitlines():
        parts = line.rstrip("\r").split("\t")
        if parts[0] == "hub-client" and len(parts) == 2:
            client = parts[1]
        elif parts[0] == "hub-refused" and len(parts) == 4:
            refusal = HubRefusal(parts[1], parts[2], parts[3])
        elif parts[0] == "deploy-df" and len(parts) == 2:
            df_line = " ".join(parts[1].split())
        elif parts[0] == "disk" and len(parts) == 4 and all(p.isdigit() for p in parts[1:]):
            disk = (int(parts[1]), int(parts[2]), int(parts[3]))
    space = DiskSpace(df_line, *disk) if disk is not None else None
    xet = [line.strip() for line in text.splitlines() if any(m in line for m in _XET_MARKS)]
    return DownloadOutput(client, refusal, space, any(m in text for m in _ENOSPC_MARKS), xet[-1] if xet else "")
