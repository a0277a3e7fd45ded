"""Real `.whl` files of the stand-ins (sglang at each simulated release, torch, flashinfer-python, flashinfer-cubin,
sglang-kernel, kernels), built with stdlib zipfile, under the real distribution names and versions.

Why real wheels: a real container's pip installs them into a real venv, so `pip show`, `pip install
sglang[tracing]==X`, console scripts and `python -m sglang.launch_server` behave as they do for the real package.
Each sglang wheel carries only its own release's flag schema; its version is in the wheel's METADATA and, so that
`import sglang` needs no importlib.metadata, in a module the build writes (sglang/_sim/wheel_version.py). Builds
are deterministic (fixed timestamps), so a rebuild of the same tree gives byte-identical wheels and pip's cache
stays valid.

A build `deploy sim index publish … --regression KIND` makes carries its knob inside the wheel
(`<package>/_sim_regression.py`, REGRESSION_MODULE): the stand-in server reads it from its own venv at start
(sglang/_sim/regression.py), so only a venv that resolved the bad build misbehaves.
"""

from __future__ import annotations

import base64
import hashlib
import re
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from .real_sizes import CLOSURES, STANDIN_BASE_BYTES, real_size
from .standin_size_hook import BALLAST_FILE, PREFIX, SIZE_FILE

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "simulator" / "sglang_standin"
#: Per-release files of the sglang stand-in that replace or add to the tree's (release_overlay).
RELEASES = STANDIN / "releases"
SCHEMAS = REPO / "orchestrator" / "flags" / "schemas"
SGLANG_VERSIONS = ("0.5.12.post1", "0.5.23")
#: The torch each release pins (real sglang 0.5.12.post1: `torch==2.11.0`, 0.5.23: `torch==2.14.1`, read in the
#: wheels' METADATA, tests/fixtures/sglang/wheels/): a stand-in under the real name and version, whose wheel is
#: `py3-none-any` where the real one is `cp311-cp311-manylinux_2_28_x86_64` (so the two never mix up in one index).
TORCH_VERSIONS = ("2.11.0", "2.14.1")
TORCH_VERSION = TORCH_VERSIONS[-1]
#: The builds of flashinfer-python (import name `flashinfer`), flashinfer-cubin (`flashinfer_cubin`) and
#: sglang-kernel (`sgl_kernel`, the name both releases pin; the stand-in was `sgl-kernel` before) the wheelhouse serves:
#: exactly those the releases pin.
FLASHINFER_VERSIONS = ("0.6.11.post1", "0.7.2")
FLASHINFER_CUBIN_VERSIONS = ("0.6.11.post1",)
SGLANG_KERNEL_VERSIONS = ("0.4.2.post2", "0.4.10")
#: The exact pins of each sglang release below it that a stand-in models, as its real wheel's `Requires-Dist` spells
#: them (tests/sim/unit/test_standin_metadata.py holds them to the real METADATA).
SGLANG_PINS = {"0.5.12.post1": ("flashinfer_python==0.6.11.post1", "flashinfer_cubin==0.6.11.post1",
                                "sglang-kernel==0.4.2.post2", "torch==2.11.0"),
               "0.5.23": ("flashinfer_python[cu13]==0.7.2", "sglang-kernel==0.4.10", "torch==2.14.1")}
#: The extras each real flashinfer-python declares (`Provides-Extra:`; 0.5.23 asks for `cu13`): accepted, empty here
#: (the real `cu13` pulls `nvidia-cutlass-dsl[cu13]`, whose bytes the sglang stand-in carries, real_sizes.py).
FLASHINFER_EXTRAS = {"0.6.11.post1": ("cu12", "cu13"), "0.7.2": ("b12x", "ptx", "cu12", "cu13", "sm107", "nvep")}
#: The builds of `kernels` (the Hub kernels library transformers imports at `import sglang`) the wheelhouse serves.
#: Real sglang 0.5.12.post1 requires it unpinned and 0.5.23 pins `kernels>=0.14.1,<0.15` (read in the wheels'
#: METADATA); a build from 0.15 on breaks `import sglang` of 0.5.12.post1 as the real kernels 0.19.1 does
#: (KERNELS_BREAKS_FROM): `deploy sim index publish kernels 0.19.1` puts one on the index, as the real index moved.
KERNELS_VERSIONS = ("0.14.1",)
KERNELS_BREAKS_FROM = (0, 15)
KERNELS_PINS = {"0.5.12.post1": "kernels", "0.5.23": "kernels<0.15,>=0.14.1"}
#: The regression knobs a published build can carry (`--regression`), read by the stand-in server at start.
REGRESSIONS = ("nan", "slow", "unsupported-arch")
#: Where a regressed build keeps its knob, inside its own top-level package.
REGRESSION_MODULE = "_sim_regression.py"
#: What the stand-in really imports, plus huggingface_hub (real sglang depends on it, so `hf` comes with it); real
#: wheels from the machine's index (wheelhouse.py), where SGLANG_PINS are stand-ins.
SGLANG_REQUIRES = ("aiohttp", "pyyaml", "huggingface_hub", "requests", "tqdm")
#: The huggingface_hub range each real release's transformers pin implies, read from the real wheels' METADATA:
#: sglang 0.5.12.post1 pins transformers==5.6.0 (huggingface-hub>=1.5.0,<2.0), 0.5.23 transformers==5.19.0
#: (huggingface-hub>=1.31.0,<3.0). A venv keeps that hub and its `hf`; deploy must not replace it.
HUB_RANGES = {"0.5.12.post1": "huggingface_hub>=1.5.0,<2.0", "0.5.23": "huggingface_hub>=1.31.0,<3.0"}
#: The extras each real release declares (`Provides-Extra:` of its wheel's METADATA, tests/fixtures/sglang/wheels/);
#: accepted, and empty here. Neither has `srt` or `blackwell`: pip warns `does not provide the extra` and goes on.
SGLANG_EXTRAS = {
    "0.5.12.post1": ("checkpoint-engine", "runai", "diffusion", "ray", "tracing", "http2", "fastokens", "test", "dev",
                     "all"),
    "0.5.23": ("checkpoint-engine", "instanttensor", "runai", "diffusion", "diffusion-qvg", "ray", "tracing", "http2",
               "fastokens", "test", "dev", "all"),
}
ZIP_DATE = (2025, 1, 1, 0, 0, 0)
#: The module a sglang wheel carries its version in (read by sglang/_sim/env.py before the metadata).
VERSION_MODULE = "sglang/_sim/wheel_version.py"


@dataclass(frozen=True)
class WheelSpec:
    """Everything that goes into one wheel."""

    name: str
    version: str
    files: dict[str, bytes]
    summary: str
    requires: tuple[str, ...] = ()
    extras: tuple[str, ...] = ()
    console_scripts: dict[str, str] = field(default_factory=dict)

    @property
    def dist(self) -> str:
        return self.name.replace("-", "_")

    @property
    def filename(self) -> str:
        return f"{self.dist}-{self.version}-py3-none-any.whl"


def _record_hash(data: bytes) -> str:
    digest = hashlib.sha256(data).digest()
    return "sha256=" + base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


def metadata_text(spec: WheelSpec) -> str:
    """Core metadata 2.1: the fields pip reads (name, version, Requires-Dist, Provides-Extra)."""
    lines = ["Metadata-Version: 2.1", f"Name: {spec.name}", f"Version: {spec.version}", f"Summary: {spec.summary}",
             "Requires-Python: >=3.10", "License: Apache-2.0"]
    lines += [f"Requires-Dist: {r}" for r in spec.requires]
    lines += [f"Provides-Extra: {e}" for e in spec.extras]
    return "\n".join(lines) + "\n\n"


def _dist_info(spec: WheelSpec) -> dict[str, bytes]:
    di = f"{spec.dist}-{spec.version}.dist-info"
    out = {f"{di}/METADATA": metadata_text(spec).encode(),
           f"{di}/WHEEL": b"Wheel-Version: 1.0\nGenerator: deploy-sim\nRoot-Is-Purelib: true\nTag: py3-none-any\n\n",
           f"{di}/top_level.txt": ("\n".join(sorted({p.split("/")[0].removesuffix(".py") for p in spec.files
                                                      if not p.endswith(".pth")})) + "\n").encode()}
    if spec.console_scripts:
        body = "".join(f"{k} = {v}\n" for k, v in sorted(spec.console_scripts.items()))
        out[f"{di}/entry_points.txt"] = ("[console_scripts]\n" + body).encode()
    return out


def build_wheel(spec: WheelSpec, out_dir: Path) -> Path:
    """Write `spec` as a wheel into `out_dir` (atomically) and return its path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / spec.filename
    tmp = path.with_name(f".{path.name}.tmp")
    di = f"{spec.dist}-{spec.version}.dist-info"
    entries = {**dict(sorted(spec.files.items())), **_dist_info(spec)}
    record = "".join(f"{name},{_record_hash(data)},{len(data)}\n" for name, data in entries.items())
    record += f"{di}/RECORD,,\n"
    with zipfile.ZipFile(tmp, "w", zipfile.ZIP_DEFLATED) as zf:
        for name, data in [*entries.items(), (f"{di}/RECORD", record.encode())]:
            info = zipfile.ZipInfo(name, ZIP_DATE)
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            zf.writestr(info, data)
    tmp.replace(path)
    return path


def _tree(top: str, root: Path = STANDIN) -> Iterator[tuple[str, bytes]]:
    for p in sorted((root / top).rglob("*")):
        rel = p.relative_to(root).as_posix()
        if p.is_file() and "__pycache__" not in p.parts:
            yield rel, p.read_bytes()


def release_overlay(release: str) -> dict[str, bytes]:
    """The files a release has in its own shape (simulator/sglang_standin/releases/<release>/), over the tree: where
    real releases differ in a file a stack patch targets (0.5.23 decides FlashInfer autotune in
    runner/flashinfer_autotune.py, not in model_runner.py)."""
    return dict(_tree("sglang", RELEASES / release)) if (RELEASES / release).is_dir() else {}


def version_module(version: str) -> bytes:
    """sglang/_sim/wheel_version.py: the release as a constant, so `import sglang` needs no importlib.metadata."""
    return (f'"""The version of this wheel, written by its build (simulator/software/wheels.py)."""\n\n'
            f"VERSION = {version!r}\n").encode()


def public_version(version: str) -> str:
    """`0.5.23+rebuild1` → `0.5.23`: an exact pin (==0.5.23) admits any local build of it (PEP 440)."""
    return version.split("+", 1)[0]


def regression_module(kind: str) -> bytes:
    """<package>/_sim_regression.py of a regressed build: the knob as a constant the server reads at start."""
    if kind not in REGRESSIONS:
        raise ValueError(f"unknown regression {kind!r} (known: {', '.join(REGRESSIONS)})")
    return (f'"""This build\'s regression, written by `deploy sim index publish --regression` (simulator/software/'
            f'wheels.py) and read by the stand-in server at start (sglang/_sim/regression.py)."""\n\n'
            f"REGRESSION = {kind!r}\n").encode()


def _with_regression(files: dict[str, bytes], package: str, regression: str | None) -> dict[str, bytes]:
    return files if regression is None else {**files, f"{package}/{REGRESSION_MODULE}": regression_module(regression)}


#: The size hook each sized stand-in wheel carries under its own name (standin_size_hook.py).
SIZE_HOOK = Path(__file__).with_name("standin_size_hook.py")


def size_files(package: str, size: int | None) -> dict[str, bytes]:
    """A stand-in's real installed bytes (`<package>/_standin_size`), its empty ballast and the hook that shows them
    to `du` as a hole at the venv's next Python start (a `.pth` line); nothing where no real size is known."""
    if size is None:
        return {}
    hook = f"{PREFIX}{package}"
    return {f"{package}/{SIZE_FILE}": f"{size}\n".encode(), f"{package}/{BALLAST_FILE}": b"",
            f"{hook}.py": SIZE_HOOK.read_bytes(), f"{hook}.pth": f"import {hook}\n".encode()}


def pinned_standins(release: str) -> list[tuple[str, str]]:
    """(normalised name, version) of every stand-in a release's venv holds besides sglang: its exact pins and the
    wheelhouse's kernels (0.5.12.post1 leaves it open, 0.5.23's range admits 0.14.1)."""
    out = []
    for pin in SGLANG_PINS[release]:
        m = re.fullmatch(r"([A-Za-z0-9_.-]+)(?:\[[^]]*\])?==(\S+)", pin)
        if m:
            out.append((m.group(1).lower().replace("_", "-"), m.group(2)))
    return [*out, ("kernels", KERNELS_VERSIONS[-1])]


def sglang_bytes(release: str) -> int | None:
    """What the sglang stand-in of `release` declares: sglang's own real bytes and those of every part of the real
    venv no stand-in models (transformers, triton, the CUDA libraries, …), so that the stand-in venv measures what
    the real one does (real_sizes.CLOSURES; without a measured closure, sglang's own bytes)."""
    closure = CLOSURES.get(release)
    own = real_size("sglang", release)
    if closure is None:
        return own.installed_bytes if own is not None else None
    others = sum(r.installed_bytes for n, v in pinned_standins(release) if (r := real_size(n, v)) is not None)
    return closure.venv_bytes - others - STANDIN_BASE_BYTES


def _sized(name: str, package: str, version: str) -> dict[str, bytes]:
    real = real_size(name, version)
    return size_files(package, real.installed_bytes if real is not None else None)


def sglang_spec(version: str, regression: str | None = None) -> WheelSpec:
    """The sglang stand-in at `version` (a local build `X+label` of a release too), with that release's flag schema
    baked into sglang/_sim/schemas/, its real pins of torch, flashinfer and sglang-kernel (SGLANG_PINS) and the
    real bytes of its release's venv (sglang_bytes)."""
    release = public_version(version)
    schema = SCHEMAS / f"sglang-{release}.json"
    if not schema.exists() or release not in SGLANG_PINS:
        raise ValueError(f"no flag schema for sglang {release} at {schema}")
    files = {**dict(_tree("sglang")), **release_overlay(release)}
    files[f"sglang/_sim/schemas/sglang-{release}.json"] = schema.read_bytes()
    files["sglang/_sim/ctside.py"] = (REPO / "simulator" / "ctside.py").read_bytes()
    files[VERSION_MODULE] = version_module(release)
    files.update(size_files("sglang", sglang_bytes(release)))
    requires = tuple(HUB_RANGES[release] if r == "huggingface_hub" else r for r in SGLANG_REQUIRES)
    return WheelSpec("sglang", version, _with_regression(files, "sglang", regression),
                     "SGLang stand-in of the deploy simulator (no GPU code)",
                     requires + SGLANG_PINS[release] + (KERNELS_PINS[release],),
                     SGLANG_EXTRAS[release], {"sglang": "sglang.cli:main"})


def torch_spec(version: str = TORCH_VERSION, regression: str | None = None) -> WheelSpec:
    """The torch stand-in (the CUDA API slice the P2P probe uses), so `pip install sglang` resolves offline; another
    `version` is a newer build `deploy sim index publish` puts on the index while hosts run."""
    files = {**dict(_tree("torch")), **_sized("torch", "torch", version)}
    return WheelSpec("torch", version, _with_regression(files, "torch", regression),
                     "torch stand-in of the deploy simulator")


def _kernel_package(package: str, version: str, what: str) -> dict[str, bytes]:
    """A kernel library's stand-in: its package with `__version__` (which sglang and its autotune cache key read)."""
    return {f"{package}/__init__.py": (f'"""{what} stand-in of the deploy simulator: its version only (no GPU code; '
                                       f'the stand-in server models the kernels)."""\n\n'
                                       f"__version__ = {version!r}\n").encode()}


def flashinfer_spec(version: str, regression: str | None = None) -> WheelSpec:
    """flashinfer-python at `version` (import name `flashinfer`): the autotune cache path keys on its version."""
    files = {**_kernel_package("flashinfer", version, "FlashInfer"),
             **_sized("flashinfer-python", "flashinfer", version)}
    extras = FLASHINFER_EXTRAS.get(public_version(version), FLASHINFER_EXTRAS[FLASHINFER_VERSIONS[-1]])
    return WheelSpec("flashinfer-python", version, _with_regression(files, "flashinfer", regression),
                     "FlashInfer stand-in of the deploy simulator", extras=extras)


def flashinfer_cubin_spec(version: str, regression: str | None = None) -> WheelSpec:
    """flashinfer-cubin at `version` (import name `flashinfer_cubin`): the prebuilt kernels 0.5.12.post1 pins, 1.5 GB
    of them in the real wheel."""
    files = {**_kernel_package("flashinfer_cubin", version, "FlashInfer cubins"),
             **_sized("flashinfer-cubin", "flashinfer_cubin", version)}
    return WheelSpec("flashinfer-cubin", version, _with_regression(files, "flashinfer_cubin", regression),
                     "flashinfer-cubin stand-in of the deploy simulator")


def sglang_kernel_spec(version: str, regression: str | None = None) -> WheelSpec:
    """sglang-kernel at `version` (import name `sgl_kernel`, as in the real wheel)."""
    files = {**_kernel_package("sgl_kernel", version, "sglang-kernel"),
             **_sized("sglang-kernel", "sgl_kernel", version)}
    return WheelSpec("sglang-kernel", version, _with_regression(files, "sgl_kernel", regression),
                     "sglang-kernel stand-in of the deploy simulator")


def kernels_spec(version: str, regression: str | None = None) -> WheelSpec:
    """kernels at `version`: `LayerRepository` as the stand-in sglang calls it at import (sglang/_sim/hub_kernels.py);
    a build from KERNELS_BREAKS_FROM on wants a revision or a version, so that call raises the real ValueError."""
    release = tuple(int(p) for p in re.findall(r"\d+", public_version(version))[:2])
    breaks = release >= KERNELS_BREAKS_FROM
    body = (f'"""kernels stand-in of the deploy simulator (the Hub kernels library), version {version}."""\n\n'
            f"__version__ = {version!r}\n\n\n"
            "class LayerRepository:\n"
            '    """A kernel layer on the Hub, by repository and revision or version."""\n\n'
            "    def __init__(self, repo_id, *, layer_name=None, revision=None, version=None):\n"
            + ('        if revision is None and version is None:\n'
               '            raise ValueError("Either a revision or a version must be specified.")\n' if breaks else
               '        revision = revision or "main"\n')
            + "        self.repo_id, self.layer_name, self.revision, self.version = repo_id, layer_name, revision, "
              "version\n")
    files = {"kernels/__init__.py": b"from kernels.layer import LayerRepository, __version__\n\n"
                                    b'__all__ = ["LayerRepository", "__version__"]\n',
             "kernels/layer.py": body.encode(), **_sized("kernels", "kernels", version)}
    return WheelSpec("kernels", version, _with_regression(files, "kernels", regression),
                     "kernels stand-in of the deploy simulator")


#: The stand-in packages by their normalised name (PEP 503), each its spec builder.
SPECS = {"sglang": sglang_spec, "torch": torch_spec, "flashinfer-python": flashinfer_spec,
         "flashinfer-cubin": flashinfer_cubin_spec, "sglang-kernel": sglang_kernel_spec, "kernels": kernels_spec}
#: The versions of each the wheelhouse serves (its own builds, never a regressed one).
WHEELHOUSE_VERSIONS = {"sglang": SGLANG_VERSIONS, "torch": TORCH_VERSIONS, "flashinfer-python": FLASHINFER_VERSIONS,
                       "flashinfer-cubin": FLASHINFER_CUBIN_VERSIONS, "sglang-kernel": SGLANG_KERNEL_VERSIONS,
                       "kernels": KERNELS_VERSIONS}


def standin_specs() -> list[WheelSpec]:
    """Every stand-in wheel of the wheelhouse: each package at each of its versions."""
    return [SPECS[name](v) for name, versions in WHEELHOUSE_VERSIONS.items() for v in versions]


def build_standin_wheels(out_dir: Path) -> list[Path]:
    """Every stand-in wheel: sglang at each simulated release and what each pins (torch, flashinfer-python,
    flashinfer-cubin, sglang-kernel), under the real names and versions."""
    return [build_wheel(s, out_dir) for s in standin_specs()]
