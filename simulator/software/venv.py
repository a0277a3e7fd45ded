"""The container's /root/ml-env: a real (tiny) venv whose `sglang` is the simulator's stand-in package.

Built by hand (pyvenv.cfg + interpreter symlinks + a .pth) instead of `python -m venv`, because inside the
container view the interpreter and the repo are only reachable through part 1's aliases (/run/deploy-sim/py,
/run/deploy-sim/repo; see simulator.config.RootConfig). Outside views (unit tests) the real paths
are used. Python dependencies (aiohttp) come from the base interpreter's site-packages.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import dataclass
from pathlib import Path

STANDIN_REL = Path("simulator/sglang_standin")
REPO = Path(__file__).resolve().parents[2]

PIP_SHIM = """#!/bin/sh
# pip stand-in of the simulated container venv (offline; see sglang/_sim/pip.py)
exec "$(dirname "$0")/python" -m sglang._sim.pip "$@"
"""

PY_WRAPPER = """#!/bin/bash
# venv interpreter inside the simulated container view (see simulator/software/venv.py)
LD_LIBRARY_PATH="{lib}${{LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}}" exec -a "$0" "{exe}" "$@"
"""

ACTIVATE = """# This file must be used with "source bin/activate" *from bash*
deactivate () {{
    PATH="$_OLD_VIRTUAL_PATH"; export PATH; unset VIRTUAL_ENV _OLD_VIRTUAL_PATH
    unset -f deactivate
}}
VIRTUAL_ENV="{prefix}"
export VIRTUAL_ENV
_OLD_VIRTUAL_PATH="$PATH"
PATH="$VIRTUAL_ENV/bin:$PATH"
export PATH
"""


@dataclass(frozen=True)
class Interp:
    """How the venv reaches its base interpreter, the stand-in package and extra site dirs."""

    exe: Path
    standin: Path
    extra_sites: tuple[Path, ...]
    libdir: Path | None = None  # set in views: the aliased libpython is not on the binary's RUNPATH there


def _view_interp(sim_root: Path) -> Interp | None:
    cfg_path = sim_root / "sim.json"
    if not cfg_path.exists():
        return None
    try:
        from simulator.config import VIEW_PY, VIEW_REPO, VIEW_VENV, RootConfig
    except ImportError:  # pragma: no cover - part 1 absent
        return None
    cfg = RootConfig.from_dict(json.loads(cfg_path.read_text()), str(cfg_path))
    sites = (VIEW_VENV / cfg.venv_site,) if cfg.venv_prefix and cfg.venv_site else ()
    return Interp(VIEW_PY / cfg.python_exe_rel, VIEW_REPO / STANDIN_REL, sites, VIEW_PY / "lib")


def _local_interp() -> Interp:
    base = Path(os.path.realpath(getattr(sys, "_base_executable", sys.executable)))
    sites: tuple[Path, ...] = ()
    if sys.prefix != sys.base_prefix:
        ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
        sites = (Path(sys.prefix) / "lib" / ver / "site-packages",)
    return Interp(base, REPO / STANDIN_REL, sites)


def create_venv(prefix: Path, version: str, view_prefix: str = "/root/ml-env", sim_root: Path | None = None) -> None:
    """Create/refresh the venv at `prefix` (on disk) that the container sees at `view_prefix`."""
    interp = (_view_interp(sim_root) if sim_root else None) or _local_interp()
    ver = f"python{sys.version_info.major}.{sys.version_info.minor}"
    bin_dir = prefix / "bin"
    site = prefix / "lib" / ver / "site-packages"
    bin_dir.mkdir(parents=True, exist_ok=True)
    site.mkdir(parents=True, exist_ok=True)
    (prefix / "pyvenv.cfg").write_text(
        f"home = {interp.exe.parent}\ninclude-system-site-packages = true\n"
        f"version = {'.'.join(map(str, sys.version_info[:3]))}\nexecutable = {interp.exe}\n")
    for name in ("python", "python3", ver):
        link = bin_dir / name
        if link.is_symlink() or link.exists():
            link.unlink()
        if name != "python":
            link.symlink_to("python")
        elif interp.libdir is None:
            link.symlink_to(interp.exe)
        else:  # exec -a keeps argv[0] in the venv, so Python still finds pyvenv.cfg
            link.write_text(PY_WRAPPER.format(lib=interp.libdir, exe=interp.exe))
            link.chmod(0o755)
    lines = [str(interp.standin), *map(str, interp.extra_sites)]
    (site / "sglang_sim.pth").write_text("\n".join(lines) + "\n")
    for name in ("pip", "pip3"):
        (bin_dir / name).write_text(PIP_SHIM)
        (bin_dir / name).chmod(0o755)
    (bin_dir / "activate").write_text(ACTIVATE.format(prefix=view_prefix))
    (prefix / "sglang-sim.json").write_text(json.dumps({"version": version}) + "\n")


MODEL_CONFIG = {
    "architectures": ["GlmMoeDsaForCausalLM"],
    "model_type": "glm_moe_dsa",
    "hidden_size": 6144,
    "num_hidden_layers": 78,
    "num_attention_heads": 64,
    "max_position_embeddings": 202752,
    "torch_dtype": "bfloat16",
    "quantization_config": {"quant_method": "modelopt", "quant_algo": "NVFP4"},
}


def create_model_dir(path: Path) -> None:
    """A weightless GLM-5-NVFP4 directory: enough for the server's config checks and the tool's probes."""
    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(MODEL_CONFIG, indent=2) + "\n")
    shards = [f"model-{i:05d}-of-00004.safetensors" for i in range(1, 5)]
    weight_map = {f"model.layers.{n}.mlp.experts.weight": shards[n % 4] for n in range(8)}
    (path / "model.safetensors.index.json").write_text(json.dumps(
        {"metadata": {"total_size": 410_000_000_000}, "weight_map": weight_map}, indent=2) + "\n")
    (path / "tokenizer_config.json").write_text(json.dumps({"tokenizer_class": "PreTrainedTokenizerFast"}) + "\n")
