"""The router step's pure parts (where it runs, the facts batch, what changed, the apply script) and the fleet
bench's figures (per-host shares from server counters, totals), in process: no host, no router."""

from __future__ import annotations

import base64
from datetime import datetime

import pytest

from orchestrator.bench.run import BenchRun
from orchestrator.errors import ConfigError
from orchestrator.fleet.bench import FleetBenchPoint, HostShare, bench_client, wait_command
from orchestrator.inventory.models import Inventory
from orchestrator.parsers.bench import BenchResult
from orchestrator.parsers.server_metrics import GENERATION_TOKENS, counter, delta
from orchestrator.remote.batch import CommandOutput
from orchestrator.router.converge import choose_workers, install_script, preflight_router
from orchestrator.router.facts import RouterFacts, apply_script, changed_files, facts_commands, parse_facts
from orchestrator.router.places import SiteAddresses, router_place
from orchestrator.router.release import RouterRelease
from orchestrator.router.render import CONF_DIR, KEY_PATH, LAUNCHER_PATH, UNIT_PATH, render_router, router_schema
from orchestrator.telemetry.summary import TelemetrySummary
from tests.unit.fleet.test_fleet_router import URLS, inventory

ROUTER_0_3_2 = RouterRelease("sglang-router", "0.3.2")

KEY = "s3cret-router-key"


def test_where_the_router_runs() -> None:
    assert router_place(inventory({"runs_on": "operator"})) is None  # the operator runs it; up leaves it alone
    assert router_place(inventory({})) is None
    place = router_place(inventory({"runs_on": "gpu-2"}))
    assert place is not None and (place.host.name, place.vmid) == ("gpu-2", 120)  # default: the server CT
    place = router_place(inventory({"runs_on": "gpu-2", "vmid": 130}))
    assert place is not None and place.describe() == "gpu-2 CT 130"
    with pytest.raises(ValueError, match=r"router\.vmid: only with runs_on: HOST"):
        inventory({"runs_on": "operator", "vmid": 130})


def with_site_index(inv: Inventory, host: str, url: str) -> Inventory:
    h = inv.hosts[host]
    ct = h.container.model_copy(update={"pip_index_url": url})
    return inv.model_copy(update={"hosts": {**inv.hosts, host: h.model_copy(update={"container": ct})}})


def test_router_installs_from_the_sites_index_unless_its_own_is_named() -> None:
    inv = inventory({"runs_on": "gpu-2"})
    assert "--index-url" not in install_script(inv)  # pip's own configuration
    script = install_script(with_site_index(inv, "gpu-2", "http://10.9.0.5:3141/simple"))
    assert "--index-url http://10.9.0.5:3141/simple --trusted-host 10.9.0.5:3141 sglang-router==0.3.2" in script
    own = inventory({"runs_on": "gpu-2", "pip_index_url": "https://pypi.example/simple"})
    script = install_script(with_site_index(own, "gpu-2", "http://10.9.0.5:3141/simple"))
    assert "--index-url https://pypi.example/simple sglang-router==0.3.2" in script and "10.9.0.5" not in script


def test_workers_are_the_healthy_targets_and_the_untouched_hosts_keep_their_place() -> None:
    cands = [("a", "http://a:8000"), ("b", "http://b:8000"), ("c", "http://c:8000")]
    first = choose_workers(cands, ["a", "b", "c"], ["a", "c"], None)
    assert (first.workers, first.left_out, first.kept, first.urls) == (["a", "c"], ["b"], [],
                                                                        ["http://a:8000", "http://c:8000"])
    # `up host a` (b failed earlier, c is in the router): c keeps its place, b stays out until it is converged
    later = choose_workers(cands, ["a"], ["a"], ["http://a:8000", "http://c:8000"])
    assert (later.workers, later.left_out, later.kept) == (["a", "c"], [], ["c"])
    fresh = choose_workers(cands, ["a"], ["a"], None)  # no router installed yet: only what this run converged
    assert fresh.urls == ["http://a:8000"]


def test_preflight_names_the_flag_and_its_choices() -> None:
    preflight_router(inventory({"runs_on": "gpu-1", "flags": {"log-level": "warn"}}))
    with pytest.raises(ConfigError) as exc:
        preflight_router(inventory({"runs_on": "gpu-1", "flags": {"log-level": "verbose"}}))
    err = exc.value
    assert err.exit_code == 2 and err.step == "router preflight" and err.host == "gpu-1"
    assert "--log-level: invalid choice 'verbose'; choose from debug, info, warn, error" in err.what


def _facts(bundle_shas: dict[str, str | None], active: str = "active") -> RouterFacts:
    return RouterFacts(probe='{"version": "0.3.2", "ok": true, "actions": []}', file_sha=bundle_shas, active=active)


def test_only_files_whose_content_differs_are_changed() -> None:
    spec = inventory({"runs_on": "gpu-1"}).router
    assert spec is not None
    bundle = render_router(spec, router_schema(ROUTER_0_3_2), URLS, KEY)
    assert bundle.key_file is not None
    same = {"unit": bundle.unit.sha256, "launcher": bundle.launcher.sha256, "key": bundle.key_file.sha256}
    assert changed_files(bundle, _facts(same)) == []
    assert changed_files(bundle, _facts({**same, "key": "0" * 64})) == [KEY_PATH]  # a new key
    other_workers = render_router(spec, router_schema(ROUTER_0_3_2), URLS[:1], KEY)
    assert changed_files(other_workers, _facts(same)) == [UNIT_PATH]  # the workers are in the unit's argv
    keyless = render_router(spec, router_schema(ROUTER_0_3_2), URLS, None)
    assert changed_files(keyless, _facts({**same, "launcher": keyless.launcher.sha256})) == [UNIT_PATH, KEY_PATH]
    assert changed_files(bundle, _facts({"unit": None, "launcher": None, "key": None})) == [
        UNIT_PATH, LAUNCHER_PATH, KEY_PATH]


def test_apply_script_carries_files_base64_and_never_the_key_in_clear() -> None:
    spec = inventory({"runs_on": "gpu-1"}).router
    assert spec is not None
    bundle = render_router(spec, router_schema(ROUTER_0_3_2), URLS, KEY)
    script = apply_script(bundle, action="restart")
    assert KEY not in script and base64.b64encode((KEY + "\n").encode()).decode() in script
    assert f"chmod 0600 {KEY_PATH}.deploy-tmp" in script and f"mkdir -p {CONF_DIR}" in script
    assert script.rstrip().endswith("systemctl restart sglang-router")
    keyless = apply_script(render_router(spec, router_schema(ROUTER_0_3_2), URLS, None), action="start")
    assert f"rm -f {KEY_PATH}" in keyless and keyless.rstrip().endswith("systemctl start sglang-router")


def test_facts_batch_runs_the_probe_with_the_router_venv_and_reads_it_back() -> None:
    spec = inventory({"runs_on": "gpu-1", "venv": "/srv/router venv"}).router
    assert spec is not None
    cmds = facts_commands(spec, ["--policy", "random"])
    assert list(cmds) == ["probe", "sha-unit", "sha-launcher", "sha-key", "execstart", "active", "migration"]
    assert "'/srv/router venv/bin/python' - router" in cmds["probe"]
    assert "<<'DEPLOY_PROBE_EOF'" in cmds["probe"] and "RouterArgs.add_cli_args" in cmds["probe"]
    facts = parse_facts({"probe": CommandOutput(0, '{"version": "0.3.2", "ok": true, "actions": []}\n', ""),
                         "sha-unit": CommandOutput(0, "ab" * 32 + "\n", ""), "sha-launcher": CommandOutput(0, "", ""),
                         "sha-key": CommandOutput(0, "", ""), "active": CommandOutput(0, "inactive\n", "")})
    assert facts.version == "0.3.2" and facts.active == "inactive"
    assert facts.file_sha == {"unit": "ab" * 32, "launcher": None, "key": None}
    missing = parse_facts({"probe": CommandOutput(0, '{"version": null, "error": "no venv"}', "")})
    assert missing.version is None and missing.active == "unknown"


METRICS_BEFORE = """# HELP sglang:generation_tokens_total Number of generation tokens processed.
# TYPE sglang:generation_tokens_total counter
sglang:generation_tokens_total{model_name="glm-5"} 1200.0
sglang:num_requests_total{model_name="glm-5"} 10.0
"""


def test_server_counters_give_each_hosts_share() -> None:
    after = METRICS_BEFORE.replace("1200.0", "9424.0").replace("10.0", "138.0")
    assert counter(METRICS_BEFORE, GENERATION_TOKENS) == 1200.0
    assert delta(METRICS_BEFORE, after, GENERATION_TOKENS) == 8224.0
    assert delta(after, METRICS_BEFORE, GENERATION_TOKENS) is None  # went down: the server restarted
    assert delta("", after, GENERATION_TOKENS) is None  # metrics off
    two_labels = after + 'sglang:generation_tokens_total{model_name="other"} 6.0\n'
    assert counter(two_labels, GENERATION_TOKENS) == 9430.0


def _telemetry(power_w: float, energy_j: float) -> TelemetrySummary:
    return TelemetrySummary(window_start=None, window_end=None, duration_s=6.0, sources=(), gpus=(),
                            total_mean_power_w=power_w, total_energy_j=energy_j, energy_method="trapezoid",
                            output_tokens=None, j_per_output_token=None, output_tokens_per_j=None,
                            tokens_per_s_per_w=None)


def test_fleet_point_figures_per_host_and_total() -> None:
    result = BenchResult(source="jsonl", completed=256, failed=0, duration_s=6.0, total_output_tokens=16384,
                         output_throughput=2730.7)
    run = BenchRun("r-1", "e2e", datetime(2026, 11, 30), result, None, [], "/x.jsonl", "")
    a = HostShare("a", 8224, 128, 6.0, _telemetry(850.0, 5100.0))
    b = HostShare("b", 8192, 128, 6.0, _telemetry(750.0, 4500.0))
    point = FleetBenchPoint(run, "a", "http://10.9.0.1:30000", [a, b])
    assert a.output_tok_s == pytest.approx(8224 / 6.0) and a.j_per_token == pytest.approx(5100.0 / 8224)
    assert a.tok_s_per_w == pytest.approx(8224 / 6.0 / 850.0)
    assert point.mean_power_w == 1600.0 and point.energy_j == 9600.0 and point.attributed_tokens == 16416
    assert point.tok_s_per_w == pytest.approx(2730.7 / 1600.0)
    assert point.j_per_token == pytest.approx(9600.0 / 16384)
    unmeasured = FleetBenchPoint(run, "a", "u", [a, HostShare("b", None, None, 6.0, None, error="metrics off")])
    assert unmeasured.mean_power_w is None and unmeasured.j_per_token is None  # no made-up total
    assert unmeasured.to_dict()["hosts"][1]["error"] == "metrics off"


def test_bench_client_is_the_routers_host_and_needs_a_managed_router() -> None:
    client = bench_client(inventory({"runs_on": "gpu-2", "port": 31000}), SiteAddresses())
    assert (client.host.name, client.vmid, client.router_host, client.router_port) == ("gpu-2", 120, "127.0.0.1",
                                                                                         31000)
    other_ct = bench_client(inventory({"runs_on": "gpu-2", "vmid": 130, "url": "http://10.9.0.50:30000"}),
                            SiteAddresses())
    assert (other_ct.router_host, other_ct.router_port) == ("10.9.0.50", 30000)
    # A router in another container without url: its container's address on the site network.
    learned = bench_client(inventory({"runs_on": "gpu-2", "vmid": 130}), SiteAddresses({("gpu-2", 130): "10.20.2.9"}))
    assert (learned.router_host, learned.router_port) == ("10.20.2.9", 30000)
    with pytest.raises(ConfigError, match="runs on the operator's machine"):
        bench_client(inventory({"runs_on": "operator"}), SiteAddresses())
    with pytest.raises(ConfigError, match="no router"):
        bench_client(inventory(None), SiteAddresses())  # type: ignore[arg-type]
    assert wait_command("/tmp/x y.stop", 90).startswith("timeout 90 bash -c ")


def test_router_facts_are_never_read_from_a_half_booted_container() -> None:
    """The server's container's check (orchestrator.facts.split_settled): CheckFailed, with what the boot waits for."""
    from orchestrator.errors import CheckFailed
    from orchestrator.facts import BOOT_UNSETTLED
    from orchestrator.remote.container import Container
    from orchestrator.remote.ssh import RemoteResult
    from orchestrator.router.converge import _read_facts

    class Node:
        def __init__(self) -> None:
            self.sent: list[str] = []

        def script(self, body: str, **_: object) -> RemoteResult:
            self.sent.append(body)
            return RemoteResult(0, f"{BOOT_UNSETTLED} starting\n", "", 0.0)

    node = Node()
    spec = inventory({"runs_on": "gpu-1"}).router
    assert spec is not None
    with pytest.raises(CheckFailed) as err:
        _read_facts(Container(node, 120), spec, ["--policy", "random"])  # type: ignore[arg-type]
    assert "CT 120 did not finish booting" in err.value.what and "'starting'" in err.value.what
    assert "systemctl is-system-running --wait" in node.sent[0]
