"""The simulated driver's power limit: `nvidia-smi -pl` as root on the host only, each GPU's range checked with
the real error line before any is set, the limit read back by `--query-gpu` and held by the draw, gone after a
reboot (simulator/gpu/powercap.py); and the stand-in server's rounds under a cap (its _sim/powercap.py)."""

from __future__ import annotations

import json
import math
import re
import time
from pathlib import Path

import pytest

from simulator.gpu import powercap
from simulator.gpu.profiles import get_profile
from tests.standin_model import powercap_module

from .conftest import SimHost
from .standins import ct_smi, make_ct_root, with_userspace

MINOR0 = get_profile("rtx-pro-6000-x8").gpus[0].minor  # GPU 0's /dev/nvidiaN (minors differ from indices)
LIMITS = "--query-gpu=index,power.limit,enforced.power.limit,power.min_limit,power.max_limit,power.default_limit"


def limits(h: SimHost) -> list[str]:
    return h.run("nvidia-smi", LIMITS, "--format=csv,noheader,nounits").stdout.splitlines()


def test_pl_sets_every_gpu_with_the_real_lines_and_query_reads_it_back(host: SimHost) -> None:
    r = host.run("nvidia-smi", "-pl", "450")
    assert r.returncode == 0, r.stdout + r.stderr
    lines = r.stdout.splitlines()
    assert lines[0] == "Power limit for GPU 00000000:06:00.0 was set to 450.00 W from 600.00 W."
    assert len(lines) == 9 and lines[-1] == "All done."
    assert limits(host)[0] == "0, 450.00, 450.00, 300.00, 600.00, 600.00"
    r = host.run("nvidia-smi", "-i", "1", "-pl", "300")
    assert r.stdout.splitlines() == ["Power limit for GPU 00000000:07:00.0 was set to 300.00 W from 450.00 W.",
                                     "All done."]
    assert [ln.split(", ")[1] for ln in limits(host)[:3]] == ["450.00", "300.00", "450.00"]
    assert "450W" in host.run("nvidia-smi").stdout.replace(" ", "")  # the table's Cap


def test_out_of_range_is_refused_with_the_real_line_and_nothing_set(host: SimHost) -> None:
    r = host.run("nvidia-smi", "-pl", "250")
    assert r.returncode == 2
    assert r.stdout == ("Provided power limit 250.00 W is not a valid power limit which should be between 300.00 W "
                        "and 600.00 W for GPU 00000000:06:00.0\nTerminating early due to previous errors.\n")
    assert all(ln.split(", ")[1] == "600.00" for ln in limits(host))


def test_a_container_may_not_set_it(tmp_path: Path) -> None:
    ct = with_userspace(make_ct_root(tmp_path / "ct", minors=[0, 1]))
    r = ct_smi(ct, "-pl", "300")
    assert r.returncode == 4
    assert re.fullmatch(r"Failed to set power management limit for GPU 00000000:[0-9A-F]{2}:00\.0: Insufficient "
                        r"Permissions\nTerminating early due to previous errors\.\n", r.stdout)


def test_the_draw_holds_at_the_cap_and_a_reboot_forgets_it(host: SimHost) -> None:
    gpu = host.dir / "gpu"
    gpu.mkdir(exist_ok=True)
    (gpu / "load-120.json").write_text(json.dumps({"vmid": 120, "updated": time.time() + 60, "minors": [MINOR0],
                                                   "power_fraction": 1.0, "util": 1.0}))
    draw = host.run("nvidia-smi", "--query-gpu=power.draw", "--format=csv,noheader,nounits", "-i", "0")
    assert float(draw.stdout) > 500
    assert host.run("nvidia-smi", "-pl", "300").returncode == 0
    draw = host.run("nvidia-smi", "--query-gpu=power.draw,clocks_event_reasons.sw_power_cap",
                    "--format=csv,noheader,nounits", "-i", "0").stdout.split(", ")
    assert float(draw[0]) <= 300 and draw[1].strip() == "Active"
    powercap.clear(str(host.dir))  # what simulator/host/reboot.py's power_on does
    assert limits(host)[0].split(", ")[1] == "600.00"


def test_the_standin_round_slows_by_the_documented_curve() -> None:
    standin = powercap_module()
    assert math.isclose(standin.throughput_ratio(0.5), 0.954, rel_tol=1e-9)  # the real report's point
    assert standin.throughput_ratio(1.2) == 1.0 and standin.throughput_ratio(0.25) < 0.954 * 0.5
    assert standin.throughput_ratio(0.75) == pytest.approx(0.75 ** standin.EXPONENT)
    cap = standin.PowerCap(None, [0])
    cap._limits = [(300.0, 40.0, 594.0)]  # what the file says once read: 300 W on a 600 W GPU idling at 40 W
    cap._read_at = time.monotonic() + 60
    ms, fraction = cap.apply(100.0, 1.0)  # a round that would draw 594 W
    assert ms == pytest.approx(100.0 / standin.throughput_ratio(300 / 594))
    assert 40 + 554 * fraction == pytest.approx(300)
    assert cap.apply(100.0, 0.2) == (100.0, 0.2)  # 151 W: under the cap, untouched
