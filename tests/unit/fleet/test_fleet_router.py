"""The router as a managed part: inventory section, unit and launcher rendering, flags checked by the parser dump
of the pinned sglang-router (0.3.2, dumped from the installed wheel by orchestrator/probes/flags_probe.py, KIND router).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.errors import ConfigError, RemoteError
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import Inventory, RouterSpec
from orchestrator.router import addresses
from orchestrator.router.places import SiteAddresses, known_worker_urls, router_base_url, router_workers, worker_url
from orchestrator.router.release import RouterRelease
from orchestrator.router.render import KEY_PATH, render_router, router_schema
from tests.shared import EXAMPLE_INVENTORY

ROUTER_0_3_2 = RouterRelease("sglang-router", "0.3.2")

REPO = Path(__file__).resolve().parents[3]
URLS = ["http://127.0.0.141:8000", "http://127.0.0.142:8000"]


def inventory(router: dict[str, object], groups: dict[str, list[str]] | None = None) -> Inventory:
    """The example inventory's host three times, with `router` (sglang-router 0.3.2 unless it names a package: these
    tests were written against it, and smg is the default since issue 50)."""
    router = {"package": "sglang-router", **router} if router else router
    base = load_inventory(EXAMPLE_INVENTORY)
    seed = base.hosts["pve-gpu-1"]
    hosts = {n: seed.model_copy(update={"name": n, "address": f"10.9.0.{i}"}).model_dump()
             for i, n in enumerate(["gpu-1", "gpu-2", "gpu-3"], start=1)}
    return Inventory.model_validate({"hosts": hosts, "profiles": {k: v.model_dump() for k, v in base.profiles.items()},
                                     "presets": {k: v.model_dump() for k, v in base.presets.items()},
                                     "groups": groups or {}, "router": router})


def test_unit_has_owned_fields_and_canonical_flags_and_no_key() -> None:
    spec = RouterSpec(package="sglang-router", policy="round_robin",
                      flags={"health-check-interval": 5, "disable-retries": True})
    bundle = render_router(spec, router_schema(ROUTER_0_3_2), URLS, "s3cret-key")
    assert bundle.argv == ("--host", "127.0.0.1", "--port", "30000", "--policy", "round_robin", "--worker-urls",
                           *URLS, "--disable-retries", "--health-check-interval-secs", "5")  # prefix → canonical
    exec_start = next(ln for ln in bundle.unit.content.splitlines() if ln.startswith("ExecStart="))
    assert exec_start.startswith("ExecStart=/opt/sglang-router/bin/python /etc/sglang-router/launch.py --host")
    for f in (bundle.unit, bundle.launcher):
        assert "s3cret-key" not in f.content and f.mode == 0o644
    assert bundle.key_file is not None and bundle.key_file.mode == 0o600 and bundle.key_file.remote_path == KEY_PATH
    assert "s3cret-key" not in str(bundle.key_file.to_dict())  # printable form is redacted
    launcher = bundle.launcher.content
    assert f'KEY_FILE = "{KEY_PATH}"' in launcher and "parse_router_args(argv)" in launcher
    keyless = render_router(spec, router_schema(ROUTER_0_3_2), URLS, None)
    assert keyless.key_file is None and 'KEY_FILE = ""' in keyless.launcher.content


def test_unknown_flag_is_refused_with_the_router_parsers_suggestion() -> None:
    with pytest.raises(ConfigError) as exc:
        render_router(RouterSpec(flags={"health-check-intervl-secs": 5}), router_schema(ROUTER_0_3_2), URLS, None)
    assert "--health-check-intervl-secs" in exc.value.what and "--health-check-interval-secs" in exc.value.what
    with pytest.raises(ConfigError, match=r"router\.api_key"):  # a prefix of an owned option is caught too
        render_router(RouterSpec(flags={"api": "x"}), router_schema(ROUTER_0_3_2), URLS, None)
    with pytest.raises(ConfigError, match=r"known: 0\.3\.2"):
        router_schema(RouterRelease("sglang-router", "0.1.0"))


def test_policy_choices_are_the_pinned_routers() -> None:
    spec = router_schema(ROUTER_0_3_2).by_option("--policy")
    assert spec is not None and set(spec.choices or ()) == {"random", "round_robin", "cache_aware", "power_of_two",
                                                             "manual"}
    with pytest.raises(ValueError, match="policy"):
        RouterSpec(policy="bucket")  # type: ignore[arg-type]


@pytest.mark.parametrize(("router", "needle"), [
    ({"runs_on": "gpu-9"}, "router.runs_on: unknown host 'gpu-9'"),
    ({"workers": "nope"}, "router.workers: unknown group 'nope'"),
    ({"worker_urls": {"gpu-7": "http://10.0.0.7:8000"}}, "router.worker_urls: unknown host 'gpu-7'"),
    ({"flags": {"worker-urls": "x"}}, "comes from the router section's own field"),
    ({"worker_urls": {"gpu-1": "10.0.0.7:8000"}}, "must look like http://ADDRESS:PORT"),
])
def test_bad_router_sections_are_refused(router: dict[str, object], needle: str) -> None:
    with pytest.raises(ValueError, match=needle):
        inventory(router)


def test_workers_are_the_group_with_url_overrides() -> None:
    inv = inventory({"workers": "prod", "worker_urls": {"gpu-2": "http://10.8.0.2:30001/"}},
                    {"prod": ["gpu-1", "gpu-2"]})
    assert [h.name for h in router_workers(inv)] == ["gpu-1", "gpu-2"]
    site = SiteAddresses({("gpu-1", 120): "127.0.20.41", ("gpu-2", 120): "127.0.20.42"})
    assert [worker_url(inv, h, site) for h in router_workers(inv)] == ["http://127.0.20.41:8000",
                                                                       "http://10.8.0.2:30001"]


def test_worker_urls_are_container_addresses_never_the_nodes() -> None:
    """The server container's own address on the site network; the node's address (10.9.0.N) is never used, and a
    container whose address is unknown gives an error naming it, not a guess."""
    inv = inventory({"runs_on": "gpu-1"}, {"prod": ["gpu-1", "gpu-2"]})
    site = SiteAddresses({("gpu-1", 120): "127.0.20.41"})
    assert worker_url(inv, inv.hosts["gpu-1"], site) == "http://127.0.20.41:8000"
    with pytest.raises(RemoteError, match="gpu-2 CT 120: its address on the site network is not known"):
        worker_url(inv, inv.hosts["gpu-2"], site)
    assert known_worker_urls(inv, site) == {"gpu-1": "http://127.0.20.41:8000"}
    assert router_base_url(inv, site) == "http://127.0.20.41:30000"
    assert inv.router is not None and inv.router.host == "0.0.0.0"  # in a container: reached over the site network
    assert RouterSpec().host == "127.0.0.1" and RouterSpec(runs_on="gpu-1", host="127.0.20.41").host == "127.0.20.41"


def test_static_net0_addresses_need_no_round_trip() -> None:
    inv = inventory({"runs_on": "gpu-1"})
    static = inv.hosts["gpu-1"].container.model_copy(update={"net0": "name=eth0,bridge=vmbr0,ip=10.20.1.7/22,"
                                                                      "gw=127.0.20.1"})
    host = inv.hosts["gpu-1"].model_copy(update={"container": static})
    site = addresses.learn([(host, 120)])  # no SSH: the address is the static ip=
    assert site.of(host, 120) == "10.20.1.7" and addresses.static_address(host, 130) is None
    assert addresses.ct_address_command(host, 120) == "ip -4 -o addr show dev eth0"


def test_router_section_in_yaml_is_one_mapping_in_one_file(tmp_path: Path) -> None:
    import shutil

    inv = tmp_path / "inventory"
    shutil.copytree(EXAMPLE_INVENTORY, inv)
    (inv / "router.yaml").write_text("router:\n  runs_on: pve-gpu-1\n  policy: power_of_two\n")
    assert load_inventory(inv).router == RouterSpec(runs_on="pve-gpu-1", policy="power_of_two")
    (inv / "router2.yaml").write_text("router:\n  port: 30001\n")
    with pytest.raises(ConfigError, match="'router' is already defined in"):
        load_inventory(inv)
