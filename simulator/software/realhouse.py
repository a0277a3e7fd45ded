"""The real sglang stacks' wheelhouse: the released sglang wheels and their whole dependency closure, on disk.

Why: the stand-in wheelhouse (wheelhouse.py) proves the tool's logic; the real wheels (torch, flashinfer,
sglang-kernel: GBs) prove it holds on what a site installs (issue 48). They are filled once per machine from this
machine's own pip configuration (no index is named here) into a directory on disk, never committed, and reused:
a fill resolves first (`pip install --dry-run --report`: the exact files and their sha256), then downloads only the
files not already present with that sha256, in small batches with `--require-hashes`, so a cut download resumes
where it stopped. The simulated host serves the directory to its container under `/real/simple`
(index.py, `DEPLOY_SIM_REAL_WHEELHOUSE`).

A closure may have no wheel of a pin for the Python it is resolved for (sglang 0.5.23 on 3.13: outlines==0.1.11 pins
outlines_core==0.1.26, which has wheels up to cp312 only): the fill then resolves again with source archives where
there is no wheel, as pip does against a public index, and serves each archive with the wheels of its build
requirements (pip builds an archive's metadata in an isolated environment from the same index), so the container's
own resolution meets what a real host's would, and `deploy lock` refuses it (orchestrator/stacks/lock.py).
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

DEFAULT_DIR = Path("/var/cache/deploy-sim/real-wheelhouse")
#: The releases this wheelhouse holds and the pins below sglang each needs to import today (docs/stacks.md
#: #constraints: 0.5.12.post1 leaves `kernels` open; 0.5.23 pins it itself).
RELEASES: dict[str, tuple[str, ...]] = {"0.5.12.post1": ("kernels<0.15",), "0.5.23": ()}
#: Distributions whose wheels run to hundreds of MB (torch, the CUDA libraries, the kernels): each is downloaded
#: alone, so a cut costs one file, not a batch.
BIG_PREFIXES = ("torch", "nvidia-", "triton", "flashinfer", "sglang", "sgl-", "cuda-", "tilelang", "flash-attn")
BATCH = 20


@dataclass(frozen=True)
class Pinned:
    """One resolved file: what pip's report says it installs."""

    name: str
    version: str
    filename: str
    sha256: str
    url: str

    @property
    def line(self) -> str:
        return f"{self.name}=={self.version} --hash=sha256:{self.sha256}"


@dataclass(frozen=True)
class Fill:
    """What a fill did: the files of the closure, how many were fetched, their bytes, and the time."""

    release: str
    python: str
    files: tuple[Pinned, ...]
    fetched: int
    fetched_bytes: int
    seconds: float

    def describe(self, root: Path) -> str:
        total = sum((root / "wheels" / p.filename).stat().st_size for p in self.files)
        return (f"sglang {self.release} for Python {self.python}: {len(self.files)} files, {total:,} bytes in "
                f"{root / 'wheels'}; fetched {self.fetched} ({self.fetched_bytes:,} bytes) in {self.seconds:.1f} s")


def real_wheelhouse_dir() -> Path:
    """$DEPLOY_SIM_REAL_WHEELHOUSE or /var/cache/deploy-sim/real-wheelhouse (on disk: tens of GB)."""
    return Path(os.environ.get("DEPLOY_SIM_REAL_WHEELHOUSE") or DEFAULT_DIR)


def wheels_of(root: Path) -> Path:
    """The flat directory the index serves (every release and Python: pip picks the file by its tags)."""
    return root / "wheels"


def interpreter(python: str) -> str:
    """The interpreter that resolves for the containers' Python `python` (3.11, 3.13): this machine's own."""
    found = shutil.which(f"python{python}")
    if found is None:
        raise RuntimeError(f"no python{python} on this machine's PATH: the real wheelhouse resolves with the "
                           "container's Python version")
    return found


def parse_report(report: dict[str, Any]) -> list[Pinned]:
    """Pure: the files of `pip install --dry-run --report`, each with its sha256 (pip's download_info)."""
    out: list[Pinned] = []
    for item in report.get("install", []):
        meta, info = item["metadata"], item["download_info"]
        url = info["url"]
        sha = info.get("archive_info", {}).get("hashes", {}).get("sha256") or ""
        if not sha:
            sha = info.get("archive_info", {}).get("hash", "sha256=").partition("=")[2]
        out.append(Pinned(meta["name"], meta["version"], unquote(urlparse(url).path.rsplit("/", 1)[-1]), sha, url))
    return sorted(out, key=lambda p: p.name.lower())


def resolve(python: str, release: str, constraints: Sequence[str], wheels_only: bool = True) -> list[Pinned]:
    """The closure of sglang==release for `python`, as this machine's pip configuration resolves it: wheels only,
    else (`wheels_only=False`) wheels where there are any and a source archive where there is none."""
    with tempfile.TemporaryDirectory(prefix="realhouse-") as tmp:
        cons = Path(tmp) / "constraints.txt"
        cons.write_text("".join(f"{c}\n" for c in constraints))
        report = Path(tmp) / "report.json"
        cmd = [interpreter(python), "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--disable-pip-version-check", "--only-binary=:all:" if wheels_only else "--prefer-binary",
               "--report", str(report), "-c", str(cons),
               f"sglang=={release}"]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            raise RuntimeError(f"resolving sglang=={release} for Python {python} failed (exit {res.returncode}):\n"
                               f"{res.stderr[-3000:]}")
        return parse_report(json.loads(report.read_text()))


def sha256_file(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def missing(files: Sequence[Pinned], wheels: Path) -> list[Pinned]:
    """The files not in `wheels` with their resolved sha256 (a wrong or partial file counts as missing)."""
    return [p for p in files if not ((wheels / p.filename).is_file() and sha256_file(wheels / p.filename) == p.sha256)]


def is_source(p: Pinned) -> bool:
    """A source archive, not a wheel: the index has no wheel of it for the Python resolved for."""
    return not p.filename.endswith(".whl")


def batches(files: Sequence[Pinned]) -> list[list[Pinned]]:
    """Pure: the download batches, the big distributions and the source archives alone, the rest BATCH at a time."""
    out: list[list[Pinned]] = []
    small: list[Pinned] = []
    for p in files:
        if p.name.lower().replace("_", "-").startswith(BIG_PREFIXES) or is_source(p):
            out.append([p])
        else:
            small.append(p)
    out += [small[i:i + BATCH] for i in range(0, len(small), BATCH)]
    return out


def _download(python: str, batch: Sequence[Pinned], wheels: Path) -> None:
    """One `pip download --no-deps --require-hashes` of a batch into a temporary dir, then moved in: a file is in
    `wheels` only once whole and checked."""
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=wheels.parent) as tmp:
        req = Path(tmp) / "batch.txt"
        req.write_text("".join(p.line + "\n" for p in batch))
        dest = Path(tmp) / "files"
        binary = [] if any(is_source(p) for p in batch) else ["--only-binary=:all:"]
        cmd = [interpreter(python), "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               *binary, "--require-hashes", "-r", str(req), "-d", str(dest)]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=3600)
        if res.returncode != 0:
            raise RuntimeError(f"pip download of {', '.join(p.filename for p in batch)} failed (exit "
                               f"{res.returncode}):\n{res.stderr[-3000:]}")
        for p in batch:
            got = dest / p.filename
            if not got.is_file():
                raise RuntimeError(f"pip download gave no {p.filename} (got {sorted(x.name for x in dest.iterdir())})")
            os.replace(got, wheels / p.filename)


#: pip's refusal when a pin has no file it may use (`--only-binary=:all:`: no wheel for this Python).
NO_MATCH = "No matching distribution found for "


def no_match(stderr: str) -> str:
    """Pure: pip's `No matching distribution found for X` line, the pin that has no wheel."""
    return next((ln.strip().removeprefix("ERROR: ") for ln in stderr.splitlines() if NO_MATCH in ln), "?")


def build_requires(sdist: Path) -> list[str]:
    """The `[build-system] requires` of a source archive's pyproject.toml (setuptools' default without one)."""
    import tarfile
    import tomllib

    with tarfile.open(sdist) as tar:
        member = next((m for m in tar.getmembers() if m.name.count("/") == 1 and m.name.endswith("/pyproject.toml")),
                      None)
        fh = tar.extractfile(member) if member is not None else None
        doc = tomllib.loads(fh.read().decode()) if fh is not None else {}
    return list(doc.get("build-system", {}).get("requires", ["setuptools>=40.8.0", "wheel"]))


def build_requirements_into(python: str, sdist: Path, wheels: Path) -> list[str]:
    """The wheels pip's isolated build of `sdist` installs (its build requirements and theirs), downloaded into
    `wheels`: the container's pip reads a source archive's metadata by building it, from the same index. Their names
    are kept in `<sdist>.build-requires`; a warm fill that finds them all downloads nothing."""
    record = sdist.with_name(sdist.name + ".build-requires")
    kept = record.read_text().split() if record.is_file() else []
    if kept and all((wheels / n).is_file() for n in kept):
        return kept
    reqs = build_requires(sdist)
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=wheels.parent) as tmp:
        cmd = [interpreter(python), "-m", "pip", "download", "--quiet", "--disable-pip-version-check",
               "--only-binary=:all:", "-d", tmp, *reqs]
        res = subprocess.run(cmd, capture_output=True, text=True, timeout=1800)
        if res.returncode != 0:
            raise RuntimeError(f"pip download of {sdist.name}'s build requirements {reqs} failed (exit "
                               f"{res.returncode}):\n{res.stderr[-3000:]}")
        got = sorted(Path(tmp).iterdir())
        for f in got:
            os.replace(f, wheels / f.name)
    record.write_text("".join(f"{f.name}\n" for f in got))
    return [f.name for f in got]


def read_manifest(path: Path, want: dict[str, object]) -> list[Pinned] | None:
    """The closure an earlier fill resolved (None: none, or for other constraints): a warm fill resolves nothing,
    it checks the files' sha256 (pip's resolution re-reads ~190 projects' metadata from the index)."""
    try:
        doc = json.loads(path.read_text())
        if {k: doc[k] for k in want} != want:
            return None
        return [Pinned(**f) for f in doc["files"]]
    except (OSError, ValueError, KeyError, TypeError):
        return None


def fill(root: Path, release: str, python: str, say: Callable[[str], None] = print, refresh: bool = False) -> Fill:
    """Resolve sglang==release for `python` (once: the closure is kept in `<root>/closure-<release>-py<python>.json`;
    `refresh` resolves again), download what is missing (resumable), and say what it did."""
    t0 = time.monotonic()
    wheels = wheels_of(root)
    wheels.mkdir(parents=True, exist_ok=True)
    manifest = root / f"closure-{release}-py{python}.json"
    want: dict[str, object] = {"release": release, "python": python,
                               "constraints": list(RELEASES.get(release, ()))}
    files = None if refresh else read_manifest(manifest, want)
    if files is None:
        try:
            files = resolve(python, release, RELEASES.get(release, ()))
        except RuntimeError as exc:
            if NO_MATCH not in str(exc):
                raise
            say(f"sglang {release}, Python {python}: no closure of wheels only ({no_match(str(exc))}); resolving "
                "again with source archives where there is no wheel")
            files = resolve(python, release, RELEASES.get(release, ()), wheels_only=False)
    todo = missing(files, wheels)
    say(f"sglang {release}, Python {python}: {len(files)} files resolved, {len(todo)} to fetch")
    fetched_bytes = 0
    for i, batch in enumerate(batches(todo), 1):
        _download(python, batch, wheels)
        got = sum((wheels / p.filename).stat().st_size for p in batch)
        fetched_bytes += got
        say(f"  [{i}] {', '.join(p.filename for p in batch)[:150]}: {got:,} bytes ({fetched_bytes:,} so far)")
        sys.stdout.flush()
    for p in (p for p in files if is_source(p)):
        say(f"  {p.filename}: no {python} wheel; its build requirements served beside it: "
            + ", ".join(build_requirements_into(python, wheels / p.filename, wheels)))
    manifest.write_text(json.dumps({**want, "files": [asdict(p) for p in files]}, indent=1) + "\n")
    return Fill(release, python, tuple(files), len(todo), fetched_bytes, time.monotonic() - t0)


def main(argv: Sequence[str] | None = None) -> int:
    """`python -m simulator.software.realhouse [--release R] [--python 3.11] [DIR]`: fill and report."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--release", action="append", choices=sorted(RELEASES))
    parser.add_argument("--python", action="append")
    parser.add_argument("--refresh", action="store_true", help="resolve again (the index moved)")
    parser.add_argument("dir", nargs="?", type=Path)
    args = parser.parse_args(argv)
    root = args.dir or real_wheelhouse_dir()
    for release in args.release or ["0.5.12.post1"]:
        for python in args.python or ["3.11"]:
            print(fill(root, release, python, refresh=args.refresh).describe(root), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
