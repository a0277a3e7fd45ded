"""The JSON documents of a release directory, typed: meta.json (what was installed, from what), verdict.json (what
the gates decided) and flags.json (the flags, secrets as references), and the lines `history` reads of them.

Every reader and writer of these files goes through these models (pure: no I/O). Files written by earlier versions
must still read: every field is optional with a default, and a field this version does not know is kept
(`extra="allow"`) and written back as it came. A document dumps only the fields that were set (read from the file
or given when built), so the bytes on disk stay what the hand-built dicts wrote. To record something new in a release
(a boot ledger, a stack's details), add an optional field here and set it where the document is built; a reader of
an older release sees its default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any, Self

from pydantic import BaseModel, ConfigDict, RootModel, SerializerFunctionWrapHandler, ValidationError, model_serializer

from orchestrator.redact import redact

#: The verdicts a release can carry.
KEPT, ROLLED_BACK, ABANDONED = "kept", "rolled-back", "abandoned"


def json_dict(text: str) -> dict[str, Any] | None:
    """One JSON object from a file's text; None when empty, invalid or not an object."""
    if not text.strip():
        return None
    try:
        data = json.loads(text)
    except json.JSONDecodeError:
        return None
    return data if isinstance(data, dict) else None


class ReleaseDocument(BaseModel):
    """A JSON object of a release: known fields typed, unknown ones kept."""

    model_config = ConfigDict(extra="allow")

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> Self | None:
        """The document from its parsed JSON; None when absent or of another shape (as an unreadable file)."""
        if data is None:
            return None
        try:
            return cls.model_validate(data)
        except ValidationError:
            return None

    @classmethod
    def from_text(cls, text: str) -> Self | None:
        return cls.from_data(json_dict(text))

    @model_serializer(mode="wrap")
    def _as_set(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """A document dumps as it was read or built: the fields that were set, unknown ones included (a default
        is never written into a file that did not have it)."""
        data: dict[str, Any] = handler(self)
        kept = self.model_fields_set | set(self.model_extra or {})
        return {k: v for k, v in data.items() if k in kept}

    def document(self) -> dict[str, Any]:
        """The JSON object as written."""
        return self.model_dump(mode="json")


class StackMeta(ReleaseDocument):
    """meta.json's `stack`: the software stack the release runs (orchestrator/stacks.py StackRecord.to_meta)."""

    sha: str | None = None
    venv: str | None = None
    sglang_version: str | None = None
    requirement: str | None = None
    patches: list[Any] | None = None  # the patches applied to it (stacks.py), when any
    cuda_home: str | None = None  # the CUDA its venv carries, the unit's CUDA_HOME (a release before: none)


class TuneMeta(ReleaseDocument):
    """meta.json's `tune`: the tune whose trial point the release is (steps/state.py TuneTrial)."""

    id: str | None = None
    original: str | None = None


class CacheMeta(ReleaseDocument):
    """meta.json's `cache`: the release's kernel cache directory in the container and the manifest the check before
    each start compares (orchestrator/caches.py)."""

    dir: str | None = None
    key: str | None = None
    manifest: dict[str, Any] | None = None


class ReleaseMeta(ReleaseDocument):
    """meta.json: written once, when the release is installed (steps/release.py install_bundle)."""

    id: str | None = None
    created_at: str | None = None
    source: str | None = None  # "up", "roll"
    bundle_sha256: str | None = None
    previous: str | None = None  # the release current before it
    profile: str | None = None
    sglang_version: str | None = None
    argv: list[str] | None = None
    stack: StackMeta | None = None  # None: a release of an earlier deploy (it runs the profile's venv)
    profile_flags_sha: str | None = None  # a roll: the profile flags it started from (steps/release.desired_flags)
    flag_diff: list[list[Any]] | None = None  # a roll: [flag, old, new] each
    tune: TuneMeta | None = None
    cache: CacheMeta | None = None  # None: a release of an earlier deploy (no managed kernel cache, no check)

    def to_json(self) -> str:
        """The file's text: world-readable evidence, redacted like any other output."""
        return json.dumps(redact(self.document()), sort_keys=True) + "\n"


class VerdictFigures(ReleaseDocument):
    """verdict.json's `candidate` and `baseline`: one bench run's figures (steps/release.py verdict_figures, a
    BenchResult as JSON). The figures the tool reads back are typed here; the others are kept as they came."""

    output_throughput: float | None = None
    p99_ttft_ms: float | None = None
    p99_tpot_ms: float | None = None


class GpuPower(ReleaseDocument):
    """One GPU of verdict.json's `telemetry` (a TelemetrySummary as JSON): its mean power over the bench."""

    mean_power_w: float | None = None


class VerdictTelemetry(ReleaseDocument):
    """verdict.json's `telemetry`: the GPU telemetry over the bench window (telemetry/summary.py TelemetrySummary
    as JSON); the figures the tool reads back typed, the rest kept."""

    gpus: list[GpuPower] | None = None
    tokens_per_s_per_w: float | None = None
    j_per_output_token: float | None = None

    @property
    def total_power_w(self) -> float | None:
        """The GPUs' mean power summed (None: no GPU said)."""
        watts = [g.mean_power_w for g in self.gpus or [] if g.mean_power_w is not None]
        return sum(watts) if watts else None


class ReleaseVerdict(ReleaseDocument):
    """verdict.json: what the gates decided about a release (steps/release.py write_verdict); a release without one
    is unverified. The figures are the bench result's and the gate's own JSON (verdict_figures, GateResult)."""

    at: str | float | None = None  # ISO time (an older file may carry epoch seconds)
    verdict: str | None = None  # KEPT, ROLLED_BACK, ABANDONED
    source: str | None = None  # "up" for up's verdict
    reason: str | None = None
    failed_step: str | None = None
    journal: list[str] | None = None  # a rolled-back release: the journal's last lines
    rolled_back_to: str | None = None
    preset: str | None = None
    candidate: VerdictFigures | None = None  # the release's bench figures
    baseline: VerdictFigures | None = None  # the previous release's, a roll's gate compared with
    baseline_evidence: dict[str, Any] | None = None  # which run the baseline is (steps/state.BaselineEvidence)
    telemetry: VerdictTelemetry | None = None
    gate: dict[str, Any] | None = None  # the throughput gate's result

    @property
    def kept(self) -> bool:
        return self.verdict == KEPT

    @property
    def measured_preset(self) -> str | None:
        """The preset its figures were measured with ("?" for an older verdict that did not say; None: no figures):
        tok/s of two presets are not comparable."""
        return (self.preset or "?") if self.candidate is not None and self.candidate.document() else None

    def to_json(self) -> str:
        """The file's text (record_file_script redacts it on the way)."""
        return json.dumps(self.document(), sort_keys=True, default=str) + "\n"


class StoredFlags(RootModel[dict[str, Any]]):
    """flags.json: the release's flags by name, each secret's value as SECRET_REF (flags.stored_flags)."""

    @classmethod
    def from_data(cls, data: dict[str, Any] | None) -> StoredFlags | None:
        return None if data is None else cls(data)

    @classmethod
    def from_text(cls, text: str) -> StoredFlags | None:
        return cls.from_data(json_dict(text))

    def to_json(self) -> str:
        """The file's text: world-readable evidence, redacted like any other output."""
        return json.dumps(redact(dict(self.root)), sort_keys=True) + "\n"


class ReleaseLine(ReleaseDocument):
    """One line `history` reads (scripts/read_releases.sh.j2): a release's id and documents, or the current id."""

    id: str | None = None
    current: str | None = None
    meta: ReleaseMeta | None = None
    verdict: ReleaseVerdict | None = None
    flags: StoredFlags | None = None
    boot: Any = None  # the release's last start as the boot ledger read it (steps/state BootStart)

    @classmethod
    def of(cls, row: ReleaseLine | Mapping[str, Any]) -> ReleaseLine | None:
        """A line typed: as it is, or from the JSON object read (None: of another shape)."""
        return row if isinstance(row, ReleaseLine) else cls.from_data(dict(row))

    @property
    def kept(self) -> bool:
        return self.verdict is not None and self.verdict.kept
