"""Real `.whl` files of the stand-ins (sglang at each simulated release, torch), built with stdlib zipfile.

Why real wheels: a real container's pip installs them into a real venv, so `pip show`, `pip install
sglang[srt]==X`, console scripts and `python -m sglang.launch_server` behave as they do for the real package.
Each sglang wheel carries only its own release's flag schema; its version is in the wheel's METADATA and, so that
`import sglang` needs no importlib.metadata, in a module the build writes (sglang/_sim/wheel_version.py). Builds
are deterministic (fixed timestamps), so a rebuild of the same tree gives byte-identical wheels and pip's cache
stays valid.
"""

from __future__ import annotations

import base64
import hashlib
import zipfile
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
STANDIN = REPO / "simulator" / "sglang_standin"
SCHEMAS = REPO / "orchestrator" / "flags" / "schemas"
SGLANG_VERSIONS = ("0.5.12.post1", "0.5.23")
TORCH_VERSION = "2.9.1+deploysim"
#: What the stand-in really imports, plus huggingface_hub (real sglang depends on it, so `hf` comes with it).
SGLANG_REQUIRES = ("aiohttp", "pyyaml", "huggingface_hub", "requests", "tqdm", "torch")
#: The huggingface_hub range each real release's transformers pin implies, read from the real wheels' METADATA:
#: sglang 0.5.12.post1 pins transformers==5.6.0 (huggingface-hub>=1.5.0,<2.0), 0.5.23 transformers==5.19.0
#: (huggingface-hub>=1.31.0,<3.0). A venv keeps that hub and its `hf`; deploy must not replace it.
HUB_RANGES = {"0.5.12.post1": "huggingface_hub>=1.5.0,<2.0", "0.5.23": "huggingface_hub>=1.31.0,<3.0"}
#: Extras real sglang 0.5.x declares (python/pyproject.toml); accepted, and empty here.
SGLANG_EXTRAS = ("srt", "blackwell", "all", "openai", "test", "dev", "decord", "tracing")
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
           f"{di}/top_level.txt": ("\n".join(sorted({p.split("/")[0] for p in spec.files})) + "\n").encode()}
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


def _tree(top: str) -> Iterator[tuple[str, bytes]]:
    for p in sorted((STANDIN / top).rglob("*")):
        rel = p.relative_to(STANDIN).as_posix()
        if p.is_file() and "__pycache__" not in p.parts:
            yield rel, p.read_bytes()


def version_module(version: str) -> bytes:
    """sglang/_sim/wheel_version.py: the release as a constant, so `import sglang` needs no importlib.metadata."""
    return (f'"""The version of this wheel, written by its build (simulator/software/wheels.py)."""\n\n'
            f"VERSION = {version!r}\n").encode()


def sglang_spec(version: str) -> WheelSpec:
    """The sglang stand-in at `version`, with that release's flag schema baked into sglang/_sim/schemas/."""
    schema = SCHEMAS / f"sglang-{version}.json"
    if not schema.exists():
        raise ValueError(f"no flag schema for sglang {version} at {schema}")
    files = dict(_tree("sglang"))
    files[f"sglang/_sim/schemas/sglang-{version}.json"] = schema.read_bytes()
    files["sglang/_sim/ctside.py"] = (REPO / "simulator" / "ctside.py").read_bytes()
    files[VERSION_MODULE] = version_module(version)
    requires = tuple(HUB_RANGES[version] if r == "huggingface_hub" else r for r in SGLANG_REQUIRES)
    return WheelSpec("sglang", version, files, "SGLang stand-in of the deploy simulator (no GPU code)",
                     requires, SGLANG_EXTRAS, {"sglang": "sglang.cli:main"})


def torch_spec(version: str = TORCH_VERSION) -> WheelSpec:
    """The torch stand-in (the CUDA API slice the P2P probe uses), so `pip install sglang` resolves offline; another
    `version` is a newer build `deploy sim index publish` puts on the index while hosts run."""
    return WheelSpec("torch", version, dict(_tree("torch")), "torch stand-in of the deploy simulator")


def build_standin_wheels(out_dir: Path) -> list[Path]:
    """Every stand-in wheel: sglang at each simulated release, and torch."""
    return [build_wheel(s, out_dir) for s in (*map(sglang_spec, SGLANG_VERSIONS), torch_spec())]
