"""docs/development.md "… a field of a release document", run: the worked example's field is the page's own code
block, taken from it and declared here on top of the shipped `ReleaseMeta` (the block's `...` stands for the shipped
fields), so the page cannot drift. Through the real machinery: the document validated and parsed, written into a
release directory by the real write script and read back by the real history script (both run by `sh` on this
test's own directory), typed by `release_lines`, and carried by `history`'s --json as written; an older release
without the field reads with its default and is written back without it."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

import pytest

from orchestrator import __version__
from orchestrator.commands.history import ReleaseHistory
from orchestrator.layout import ContainerPaths
from orchestrator.releases import store
from orchestrator.releases.documents import ReleaseMeta, StoredFlags
from orchestrator.releases.store import ReleaseBundle, read_releases_script, release_lines, write_release_script
from tests.shared import doc_examples

RID, OLD_RID = "20261207T120000-0123abcd", "20261101T090000-89abcdef"


@pytest.fixture
def meta_model() -> type[ReleaseMeta]:
    """ReleaseMeta with the page's field: its block run with `ReleaseDocument` bound to the shipped ReleaseMeta."""
    (block,) = doc_examples("… a field of a release document")
    ns: dict[str, Any] = {"ReleaseDocument": ReleaseMeta}
    exec(block, ns)  # the page's own code is what is under test
    model: type[ReleaseMeta] = ns["ReleaseMeta"]
    assert set(model.model_fields) - set(ReleaseMeta.model_fields) == {"installed_by"}
    return model


def sh(script: str) -> str:
    proc = subprocess.run(["sh", "-c", script], capture_output=True, text=True, timeout=30, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_field_is_typed_and_validated(meta_model: type[ReleaseMeta]) -> None:
    meta = meta_model.from_text(json.dumps({"id": RID, "installed_by": "0.1.0"}))
    assert meta is not None and meta.installed_by == "0.1.0"  # type: ignore[attr-defined]
    older = meta_model.from_text(json.dumps({"id": OLD_RID}))
    assert older is not None and older.installed_by is None  # type: ignore[attr-defined]
    assert older.document() == {"id": OLD_RID}  # the default is not written into a file that lacked it
    assert meta_model.from_text(json.dumps({"id": RID, "installed_by": {"v": 1}})) is None  # of another shape


def test_the_field_round_trips_through_the_release_directory_and_history(meta_model: type[ReleaseMeta],
                                                                          tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(store, "PATHS", ContainerPaths(state_dir=str(tmp_path / "state")))
    flags = StoredFlags({"tp-size": 8})
    for rid, meta in ((OLD_RID, meta_model.model_validate({"id": OLD_RID, "source": "up"})),
                      (RID, meta_model.model_validate({"id": RID, "source": "roll", "installed_by": __version__}))):
        sh(write_release_script(ReleaseBundle(rid, (), flags, meta)))
    on_disk = meta_model.from_text((tmp_path / "state" / "releases" / RID / "meta.json").read_text())
    assert on_disk is not None and on_disk.installed_by == __version__  # type: ignore[attr-defined]

    lines = release_lines(sh(read_releases_script()))
    releases = [line for line in lines if line.id is not None]
    assert [r.id for r in releases] == [OLD_RID, RID]
    old, new = (meta_model.model_validate(r.meta.document()) for r in releases if r.meta is not None)
    assert (old.installed_by, new.installed_by) == (None, __version__)  # type: ignore[attr-defined]
    payload = ReleaseHistory(host="pve-gpu-1", releases=releases).payload()  # `history --json`'s document
    assert [r["meta"] for r in payload["releases"]] == [{"id": OLD_RID, "source": "up"},
                                                        {"id": RID, "source": "roll", "installed_by": __version__}]
