"""The simulated host's wheelhouse and PEP 503 index: a real venv installs sglang from it with the real pip.

The wheelhouse fill needs package access once (CI has it); after that it is cached and everything is offline:
the venvs' pip sees no configuration but `--index-url` of the simulated host.
"""

from __future__ import annotations

import hashlib
import re
import threading
from pathlib import Path

import requests

from simulator.software import wheelhouse
from simulator.software.index import normalize

from .standins import Venv, make_venv, session_index, sglang_venv


def test_wheelhouse_is_filled_once_and_holds_what_containers_install() -> None:
    idx = session_index()
    results: list[wheelhouse.Wheelhouse] = []
    threads = [threading.Thread(target=lambda: results.append(wheelhouse.fill(idx.server.wheelhouse)))
               for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [r.downloaded for r in results] == [False, False]  # filled by session_index(); the lock serialises
    names = [p.name for p in results[0].wheels]
    for want in ("sglang-0.5.12.post1-py3-none-any.whl", "sglang-0.5.23-py3-none-any.whl",
                 "torch-2.11.0-py3-none-any.whl", "torch-2.14.1-py3-none-any.whl"):
        assert want in names
    assert any(re.fullmatch(r"huggingface_hub-1\.\d+\.\d+-py3-none-any\.whl", n) for n in names), names
    assert any(n.startswith("sglang_router-0.3.2-") for n in names), names
    # never the real torch: the stand-in has the real version, the real wheel a cp3xx tag
    assert not any(n.startswith("torch-") and not n.endswith("-py3-none-any.whl") for n in names), names


def test_simple_index_follows_pep_503() -> None:
    idx = session_index()
    root = requests.get(idx.url + "/", timeout=10)
    assert root.status_code == 200 and 'href="/simple/sglang/"' in root.text
    assert 'href="/simple/sglang-router/"' in root.text and 'href="/simple/huggingface-hub/"' in root.text
    page = requests.get(idx.url + "/SGLang/", timeout=10)  # names are normalised
    links = re.findall(r'href="([^"]+)"', page.text)
    files = {link.split("#")[0].rsplit("/", 1)[1]: link.split("#sha256=")[1] for link in links}
    assert set(files) == {"sglang-0.5.12.post1-py3-none-any.whl", "sglang-0.5.23-py3-none-any.whl"}
    for name, digest in files.items():
        got = requests.get(idx.url.removesuffix("/simple") + f"/files/{name}", timeout=10)
        assert hashlib.sha256(got.content).hexdigest() == digest
        # Immutable, as a registry serves a file: the container's pip caches it (the disk budget counts that cache).
        assert "immutable" in got.headers["Cache-Control"]
    assert requests.get(idx.url + "/no-such-project/", timeout=10).status_code == 404
    assert normalize("Huggingface_Hub") == "huggingface-hub"


def test_real_venv_installs_sglang_offline_from_the_index() -> None:
    venv = sglang_venv()
    idx = session_index()
    assert any(r.startswith("GET /files/sglang-0.5.23-") for r in idx.server.requests)
    out = venv.run(venv.bin("python"), "-c", "import sglang; print(sglang.__version__)")
    assert out.stdout.strip() == "0.5.23", out.stderr
    show = venv.run(venv.bin("pip"), "show", "sglang")
    assert "Version: 0.5.23" in show.stdout and "huggingface_hub" in show.stdout
    help_new = venv.run(venv.bin("python"), "-m", "sglang.launch_server", "--help")
    assert help_new.returncode == 0 and "--cuda-graph-max-bs-decode" in help_new.stdout
    assert venv.run(venv.bin("sglang"), "serve", "--help").returncode == 0
    assert venv.run(venv.bin("python"), "-m", "sglang.bench_serving", "--help").returncode == 0
    hf = venv.run(venv.bin("hf"), "version")
    assert hf.returncode == 0 and re.search(r"\b1\.\d+\.\d+", hf.stdout + hf.stderr), hf.stdout + hf.stderr


def test_pip_switches_releases_and_installs_hf_and_router(tmp_path: Path) -> None:
    venv: Venv = make_venv(tmp_path / "tools", "huggingface_hub", "sglang-router==0.3.2", "sglang==0.5.12.post1")
    assert venv.run(venv.bin("hf"), "--help").returncode == 0
    assert venv.run(venv.bin("python"), "-c", "import sglang_router").returncode == 0
    out = venv.run(venv.bin("python"), "-m", "sglang.launch_server", "--help")
    assert out.returncode == 0 and "--cuda-graph-max-bs-decode" not in out.stdout and "--model-path" in out.stdout
    up = venv.run(venv.bin("pip"), "install", "--no-cache-dir", "--index-url", session_index().url, "sglang==0.5.23")
    # the release's exact torch and kernel pins move with it (simulator/software/wheels.py SGLANG_PINS)
    assert up.returncode == 0 and "Successfully installed flashinfer_python-0.7.2 sglang-0.5.23 sglang-kernel-0.4.10 " \
        "torch-2.14.1" in up.stdout, up.stdout + up.stderr
    ver = venv.run(venv.bin("python"), "-c", "import sglang; print(sglang.__version__)")
    assert ver.stdout.strip() == "0.5.23"
    missing = venv.run(venv.bin("pip"), "install", "--no-cache-dir", "--index-url", session_index().url,
                       "sglang==0.4.0")
    assert missing.returncode != 0 and "No matching distribution found for sglang==0.4.0" in missing.stderr
