"""The kernel cache (orchestrator/caches.py): the key per stack and shape, the unit's env, the check before a start
(run for real with this interpreter) and its parse, the boot ledger's use of it, and the bind mounts it needs."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from pydantic import ValidationError

from orchestrator.inventory.models import ContainerSpec
from orchestrator.parsers.boot import BootPhase, BootStart
from orchestrator.releases.documents import ReleaseMeta
from orchestrator.stacks.kernel_caches import (
    CacheCheck,
    CacheShape,
    cache_dir,
    cache_env,
    cache_key,
    check_shell,
    manifest,
    parse_check,
)


def test_the_cache_key_is_the_stack_and_the_shape() -> None:
    shape = CacheShape.from_flags("/models/glm5", {"tensor-parallel-size": 8, "quantization": "modelopt_fp4",
                                                   "moe-runner-backend": "flashinfer_cutlass"})
    assert shape == CacheShape("/models/glm5", "modelopt_fp4", 8, "flashinfer_cutlass")
    assert CacheShape.from_flags("/m", {}) == CacheShape("/m", "auto", 1, "auto")
    key = cache_key("d8c3bdd67250", "/root/ml-env", shape)
    assert key.startswith("d8c3bdd67250-") and len(key) == 25
    assert cache_key("50c1fa50a5bb", "/root/ml-env", shape) != key  # another stack: another cache
    tp4 = CacheShape("/models/glm5", "modelopt_fp4", 4, "flashinfer_cutlass")
    assert cache_key("d8c3bdd67250", "/root/ml-env", tp4) != key  # another shape too
    other_moe = CacheShape("/models/glm5", "modelopt_fp4", 8, "triton")
    assert cache_key("d8c3bdd67250", "/root/ml-env", other_moe) != key
    assert cache_key("", "/root/ml-env", shape).startswith("venv")  # an earlier deploy's stack: its venv
    env = dict(cache_env(cache_dir(key)))
    assert env["SGLANG_CACHE_DIR"] == env["FLASHINFER_WORKSPACE_BASE"] == f"/var/cache/deploy/kernels/{key}"
    assert env["TRITON_CACHE_DIR"].endswith("/triton") and env["SGLANG_DG_CACHE_DIR"].endswith("/deep_gemm")


def _check(tmp_path: Path, spec: dict[str, object] | None, *, look: bool = False) -> str:
    meta = tmp_path / "meta.json"
    meta.write_text(json.dumps({"id": "r", **({"cache": spec} if spec else {})}))
    script = check_shell(str(meta), look=look).replace("python3 ", f"{sys.executable} ", 1)
    return subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True).stdout


def test_the_cache_check_creates_keeps_and_sets_aside(tmp_path: Path) -> None:
    shape = CacheShape("/m", "auto", 8, "flashinfer_cutlass")
    d = tmp_path / "kernels" / cache_key("aaaaaaaaaaaa", "/v", shape)
    spec = {"dir": str(d), "manifest": manifest(d.name, "aaaaaaaaaaaa", "/v", shape)}
    assert _check(tmp_path, None) == ""  # a release of an earlier deploy: nothing to check
    assert parse_check(_check(tmp_path, spec, look=True)) == CacheCheck(dir=str(d), state="absent")
    assert not d.exists()  # a look changes nothing
    first = parse_check(_check(tmp_path, spec))
    assert first is not None and first.state == "fresh" and first.cold and (d / "deploy-cache.json").is_file()
    # the start after that check died before it wrote a kernel (the real server did, in its argument parsing, on the
    # GPU machine; the next start then compiled for 58 s on a cache the check had called warm): still cold
    again = parse_check(_check(tmp_path, spec))
    assert again is not None and again.state == "fresh" and again.cold and "holds only its manifest" in again.reason
    looked_empty = parse_check(_check(tmp_path, spec, look=True))
    assert looked_empty is not None and looked_empty.state == "absent" and "only its manifest" in looked_empty.line()
    (d / "triton").mkdir()  # a start wrote its kernels
    warm = parse_check(_check(tmp_path, spec))
    assert warm is not None and warm.state == "warm" and not warm.cold
    tuned = d / "flashinfer" / "autotune" / "0.6.1" / "sm120" / "0123456789abcdef"
    tuned.mkdir(parents=True)
    (tuned / "rank_tp0_pp0_dp0.json").write_text('{"tactics": ')  # cut off mid-write
    looked = parse_check(_check(tmp_path, spec, look=True))
    assert looked is not None and looked.state == "failing" and (tuned / "rank_tp0_pp0_dp0.json").is_file()
    damaged = parse_check(_check(tmp_path, spec))
    assert damaged is not None and damaged.state == "set-aside"
    assert "unreadable autotune file flashinfer/autotune/0.6.1/sm120/0123456789abcdef/rank_tp0_pp0_dp0.json" \
        in damaged.reason
    assert Path(damaged.moved_to).is_dir() and (Path(damaged.moved_to) / "flashinfer").is_dir()  # kept, renamed
    assert Path(damaged.moved_to).name.startswith(f"{d.name}.set-aside-")
    assert not (d / "flashinfer").exists() and (d / "deploy-cache.json").is_file()
    assert damaged.line().startswith(f"kernel cache {d} failed its check (unreadable autotune file ")
    other = {"dir": str(d), "manifest": manifest(d.name, "bbbbbbbbbbbb", "/v", shape)}
    foreign = parse_check(_check(tmp_path, other))
    assert foreign is not None and foreign.state == "set-aside" and "manifest names stack aaaaaaaaaaaa" in \
        foreign.reason


def test_parse_check_takes_the_last_line_and_refuses_garbage() -> None:
    line = 'DEPLOY_CACHE={"dir": "/d", "state": "warm", "reason": "", "moved_to": ""}'
    assert parse_check(f"JOURNAL_CURSOR=s=1\n{line}\nCreated symlink\n") == CacheCheck(dir="/d", state="warm")
    assert parse_check("nothing\n") is None
    assert parse_check('DEPLOY_CACHE={"dir": "/d", "state": "lukewarm"}') is None
    assert parse_check("DEPLOY_CACHE=not json") is None


def test_release_meta_keeps_the_cache_and_reads_an_older_release() -> None:
    meta = ReleaseMeta.model_validate({"id": "r", "cache": {"dir": "/d", "key": "k", "manifest": {"key": "k"},
                                                            "later": 1}})
    assert meta.cache is not None and meta.cache.dir == "/d"
    assert json.loads(meta.to_json())["cache"] == {"dir": "/d", "key": "k", "manifest": {"key": "k"}, "later": 1}
    old = ReleaseMeta.model_validate({"id": "r"})
    assert old.cache is None and "cache" not in json.loads(old.to_json())


def test_a_start_on_a_new_cache_is_cold_in_the_ledger() -> None:
    lines_warm = BootStart(complete=True, total_s=6.0)
    fresh = lines_warm.judged(CacheCheck(dir="/d", state="fresh"))
    assert fresh.cold and fresh.kernel_cache is not None and fresh.summary().endswith("kernel cache fresh")
    warm = lines_warm.judged(CacheCheck(dir="/d", state="warm"))
    assert warm.cold is False and warm.summary() == "warm start 6 s, kernel cache warm"
    assert lines_warm.judged(None).cold is None  # no check, nothing to compare: not known
    # a warm autotune cache still prints autotune's line: with the check, the line decides nothing
    read_tuned = BootStart(complete=True, total_s=5.0, phases=[BootPhase(name="autotune", seconds=0.0)])
    assert read_tuned.judged(CacheCheck(dir="/d", state="warm")).cold is False


def _spec(**extra: object) -> dict[str, object]:
    return {"vmid": 120, "hostname": "h", "ostemplate": "local:vztmpl/d.tar.zst", "cores": 8, "memory_mb": 1024,
            "rootfs_size_gb": 8, "unprivileged": True, **extra}


def test_the_host_cache_dir_defaults_per_vmid_and_is_validated() -> None:
    assert ContainerSpec.model_validate(_spec()).kernel_cache_dir == "/var/lib/deploy/kernel-cache/120"
    own = ContainerSpec.model_validate(_spec(kernel_cache="/tank/kernels/"))
    assert own.kernel_cache_dir == "/tank/kernels"
    for bad in ("tank/kernels", "/tank/../etc", "/tank/my kernels", "/"):
        with pytest.raises(ValidationError):
            ContainerSpec.model_validate(_spec(kernel_cache=bad))


@pytest.mark.parametrize("system", ["/tmp", "/var/tmp", "/etc", "/etc/pve", "/var/lib", "/home", "/usr/local",
                                    "/tank", "/var/lib/deploy/kernel-cache", "/run/lock"])
def test_a_system_directory_is_refused_as_a_kernel_cache(system: str) -> None:
    """Issue 50 item 4: `up` makes the cache directory the container root's; `kernel_cache: /tmp` cost a node its
    /tmp's sticky bit and world write. A system (or top-level) directory is refused at load, with the fix."""
    with pytest.raises(ValidationError, match="is a system directory"):
        ContainerSpec.model_validate(_spec(kernel_cache=system))
    assert ContainerSpec.model_validate(_spec(kernel_cache="/tank/kernel-cache/120")).kernel_cache_dir == \
        "/tank/kernel-cache/120"


def test_set_aside_caches_are_pruned_to_the_newest_few(tmp_path: Path) -> None:
    """Issue 50 (LOW): each set-aside kept a whole cache forever. Now a set-aside keeps only the newest
    KEEP_SET_ASIDE of the cache root (itself included); the working cache and others' caches stay."""
    import os

    from orchestrator.stacks import kernel_caches as caches

    keep = getattr(caches, "KEEP_SET_ASIDE", 2)
    shape = CacheShape("/m", "auto", 8, "flashinfer_cutlass")
    root = tmp_path / "kernels"
    d = root / cache_key("aaaaaaaaaaaa", "/v", shape)
    other = root / cache_key("bbbbbbbbbbbb", "/v", shape)
    other.mkdir(parents=True)
    old = []
    for n in range(4):
        p = root / f"{d.name}.set-aside-2026010{n}T000000"
        (p / "triton").mkdir(parents=True)
        os.utime(p, (1_700_000_000 + n, 1_700_000_000 + n))
        old.append(p)
    spec = {"dir": str(d), "manifest": manifest(d.name, "aaaaaaaaaaaa", "/v", shape)}
    d.mkdir()
    (d / "deploy-cache.json").write_text("{}")  # a manifest of nobody's: set aside
    check = parse_check(_check(tmp_path, spec))
    assert check is not None and check.state == "set-aside"
    aside = sorted(p.name for p in root.iterdir() if ".set-aside-" in p.name)
    assert len(aside) == keep and Path(check.moved_to).name in aside and old[-1].name in aside, aside
    assert d.is_dir() and other.is_dir()


def test_flashinfer_cubins_are_shared_per_flashinfer_version(tmp_path: Path) -> None:
    """Issue 48 (6): a stack without flashinfer-cubin (sglang 0.5.23) downloads its cubins into
    FLASHINFER_WORKSPACE_BASE/.cache/flashinfer/cubins, i.e. into every stack × shape directory. The check before a
    start links that directory to one place per flashinfer version, and a link alone is not a warm cache."""
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.13" / "site-packages" / "flashinfer_python-0.7.2.dist-info").mkdir(parents=True)
    root = tmp_path / "kernels"
    shared = root / "flashinfer-cubins" / "0.7.2"
    dirs = []
    for tp in (4, 8):
        shape = CacheShape("/m", "auto", tp, "flashinfer_cutlass")
        d = root / cache_key("aaaaaaaaaaaa", str(venv), shape)
        spec = {"dir": str(d), "manifest": manifest(d.name, "aaaaaaaaaaaa", str(venv), shape)}
        first = parse_check(_check(tmp_path, spec))
        assert first is not None and first.state == "fresh"
        link = d / ".cache" / "flashinfer" / "cubins"
        assert link.is_symlink() and link.resolve() == shared.resolve() and shared.is_dir()
        again = parse_check(_check(tmp_path, spec))  # the start died before writing a kernel: still cold
        assert again is not None and again.state == "fresh" and "holds only its manifest" in again.reason
        dirs.append((d, spec))
    (dirs[0][0] / ".cache" / "flashinfer" / "cubins" / "fmha").mkdir()  # a download through one shape's link
    assert (dirs[1][0] / ".cache" / "flashinfer" / "cubins" / "fmha").is_dir()  # seen by the other
    (dirs[0][0] / "triton").mkdir()
    warm = parse_check(_check(tmp_path, dirs[0][1]))
    assert warm is not None and warm.state == "warm"


def test_a_cache_with_its_own_cubins_moves_them_to_the_shared_place(tmp_path: Path) -> None:
    venv = tmp_path / "venv"
    (venv / "lib" / "python3.11" / "site-packages" / "flashinfer_python-0.6.11.post1.dist-info").mkdir(parents=True)
    shape = CacheShape("/m", "auto", 8, "flashinfer_cutlass")
    d = tmp_path / "kernels" / cache_key("aaaaaaaaaaaa", str(venv), shape)
    spec = {"dir": str(d), "manifest": manifest(d.name, "aaaaaaaaaaaa", str(venv), shape)}
    own = d / ".cache" / "flashinfer" / "cubins"
    own.mkdir(parents=True)
    (own / "kernel.cubin").write_bytes(b"\x7fELF")
    (d / "deploy-cache.json").write_text(json.dumps(spec["manifest"], sort_keys=True))
    check = parse_check(_check(tmp_path, spec))
    assert check is not None and check.state == "warm"  # an earlier start's cubins are kernels it wrote
    shared = tmp_path / "kernels" / "flashinfer-cubins" / "0.6.11.post1"
    assert own.is_symlink() and (shared / "kernel.cubin").read_bytes() == b"\x7fELF"


def test_no_link_without_exactly_one_flashinfer_in_the_stack(tmp_path: Path) -> None:
    shape = CacheShape("/m", "auto", 8, "flashinfer_cutlass")
    d = tmp_path / "kernels" / cache_key("aaaaaaaaaaaa", "/nonexistent-venv", shape)
    spec = {"dir": str(d), "manifest": manifest(d.name, "aaaaaaaaaaaa", "/nonexistent-venv", shape)}
    check = parse_check(_check(tmp_path, spec))
    assert check is not None and check.state == "fresh"
    assert not (d / ".cache").exists() and not (tmp_path / "kernels" / "flashinfer-cubins").exists()
