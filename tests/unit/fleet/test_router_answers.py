"""Issue 21 item 2: a router that answers 200 with HTML or with JSON of the wrong shape is a RemoteError that says
what came back (never a JSONDecodeError / AttributeError traceback), and a fleet roll whose host job fails that way,
or raises, exits non-zero with the same code its summary line prints.

The router here is a handler passed as the HTTP transport (remote/http.py): no socket."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from urllib.parse import urlsplit

import pytest
from rich.console import Console

from orchestrator.cli.router_view import router_view
from orchestrator.commands.roll import RollOutcome, RollResult
from orchestrator.errors import RemoteError
from orchestrator.fleet.engine import EngineStats, FleetRun, HostEvents, HostOutcome
from orchestrator.fleet.fleet_roll import fleet_roll
from orchestrator.fleet.rollout import RollSpec, RollStore
from orchestrator.fleet.targets import TargetSpec
from orchestrator.fleet.view import fleet_summary, totals_text
from orchestrator.inventory.loader import load_inventory
from orchestrator.inventory.models import Inventory
from orchestrator.remote.http import HandlerTransport, Request, Response, Transport
from orchestrator.router.client import RouterClient
from orchestrator.ui.output import Output
from tests.shared import EXAMPLE_INVENTORY

HTML = "<html><body><h1>Welcome to nginx!</h1></body></html>"


BASE = "http://127.0.0.1:41000"  # never bound: only the handler answers


@pytest.fixture
def router() -> tuple[str, dict[str, tuple[int, str, str]], Transport]:
    """The router's URL, its answers (path → (status, content type, body); 404 unless given) and the transport."""
    answers: dict[str, tuple[int, str, str]] = {"/health": (200, "text/plain", "ok")}

    def answer(req: Request) -> Response:
        assert req.url.startswith(BASE)
        status, kind, body = answers.get(urlsplit(req.url).path, (404, "text/plain", "not found"))
        return Response(status, body, kind)

    return BASE, answers, HandlerTransport(answer)


@pytest.mark.parametrize("kind, body, said", [
    ("text/html", HTML, "no JSON (text/html), not a JSON object: <html><body><h1>Welcome to nginx!"),
    ("application/json", '["w1", "w2"]', "a JSON list"),
    ("application/json", '{"workers": "none"}', '"workers" should be a list'),
    ("application/json", '{"workers": ["http://10.0.0.1:8000"]}', "each worker should be an object"),
])
def test_a_router_answer_that_is_not_its_json_is_a_remote_error_saying_what_came_back(router, kind, body,
                                                                                        said) -> None:
    base, answers, http = router
    answers["/workers"] = (200, kind, body)
    with RouterClient(base, timeout_s=5.0, transport=http) as client, pytest.raises(RemoteError) as caught:
        client.list_workers()
    assert said in caught.value.what and caught.value.fix


def test_a_post_answered_with_html_is_a_remote_error(router) -> None:
    base, answers, http = router
    answers["/workers"] = (202, "text/html", HTML)
    with RouterClient(base, timeout_s=5.0, transport=http) as client, \
            pytest.raises(RemoteError, match="not a JSON object"):
        client.add_worker("http://10.0.0.1:8000")


# ---------------------------------------------------------------------------------------------- fleet roll
@dataclass
class _App:
    inventory: Inventory
    inventory_paths: str = "inventory"
    out: Output = field(default_factory=lambda: Output(as_json=False, console=Console(record=True, width=200)))
    http: Transport | None = None


@dataclass
class _Rolls:
    """HostRolls' surface: every plan passes; a roll raises when told to."""

    raises: bool = False

    def plan(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
        return RollOutcome(name, RollResult.PLANNED), HostOutcome(name, "would change")

    def roll(self, name: str, events: HostEvents) -> tuple[RollOutcome, HostOutcome]:
        if self.raises:
            raise RuntimeError("a bug in one host's roll")
        return RollOutcome(name, RollResult.KEPT), HostOutcome(name, "changed")

    def revert(self, name: str, events: HostEvents, to_release: str) -> HostOutcome:
        raise AssertionError("nothing to revert")


def _inventory(router_url: str | None, **router: object) -> Inventory:
    """Two hosts in group g, no API key; a router section at `router_url` (with more `router` fields) if given."""
    base = load_inventory(EXAMPLE_INVENTORY)
    seed = base.hosts["pve-gpu-1"]
    hosts = {n: seed.model_copy(update={"name": n, "address": f"10.9.0.{i}", "container": seed.container.model_copy(
                 update={"net0": f"name=eth0,bridge=vmbr0,ip=127.0.20.{i}/22,gw=127.0.20.254"})}).model_dump()
             for i, n in enumerate(["gpu-1", "gpu-2"], start=1)}
    profiles = {k: v.model_copy(update={"api_key": None}).model_dump() for k, v in base.profiles.items()}
    return Inventory.model_validate({"hosts": hosts, "profiles": profiles,
                                     "presets": {k: v.model_dump() for k, v in base.presets.items()},
                                     "groups": {"g": ["gpu-1", "gpu-2"]},
                                     "router": {"url": router_url, **router} if router_url else None})


def _roll(monkeypatch, tmp_path: Path, inventory: Inventory, rolls: _Rolls,
          http: Transport | None = None) -> tuple[int, str]:
    monkeypatch.setattr("orchestrator.fleet.fleet_roll._host_rolls", lambda *a, **k: rolls)
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))  # its own host claims, not another test's
    app = _App(inventory, http=http)
    code = fleet_roll(app, TargetSpec(groups=("g",)), RollSpec(set=["max-running-requests=64"]), tofu=False,
                      resume=False, drain_timeout_s=5.0, store=RollStore(tmp_path / "rolls"))
    return code, app.out.console.export_text()


def test_a_fleet_roll_through_a_router_answering_html_exits_non_zero_as_its_summary_says(router, monkeypatch,
                                                                                         tmp_path) -> None:
    base, answers, http = router
    answers["/workers"] = (200, "text/html", HTML)
    code, text = _roll(monkeypatch, tmp_path, _inventory(base), _Rolls(), http)
    assert code == 3  # the worst host's: a RemoteError
    assert f"; failed; exit {code};" in text
    assert "JSONDecodeError" not in text and "not a JSON object" in text


def test_a_host_job_that_raises_makes_the_fleet_roll_exit_non_zero(monkeypatch, tmp_path) -> None:
    code, text = _roll(monkeypatch, tmp_path, _inventory(None), _Rolls(raises=True))
    assert code == 1
    assert f"; failed; exit {code};" in text and "internal error" in text


def test_the_fleet_totals_line_says_the_process_exit_code() -> None:
    run = FleetRun([HostOutcome("gpu-1", "ok"), HostOutcome("gpu-2", "changed")], EngineStats(parallel=2), 0.1)
    # e.g. `up` on a fleet whose hosts all passed but whose router report failed: the command exits 1
    assert "; exit 1 (parallel 2" in totals_text(run, 1) and fleet_summary(run, 1)["exit_code"] == 1
    assert "; exit 0 (parallel 2" in totals_text(run)


@pytest.mark.parametrize("kind, body", [("text/html", HTML), ("application/json", '["not", "an", "object"]')])
def test_status_of_a_group_reports_a_router_answering_something_else(router, kind, body) -> None:
    """`deploy status group G` printed a JSONDecodeError / AttributeError traceback; now one line says why."""
    base, answers, http = router
    answers["/workers"] = (200, kind, body)
    outcomes = [HostOutcome("gpu-1", "ok"), HostOutcome("gpu-2", "ok")]
    view = router_view(SimpleNamespace(inventory=_inventory(base), http=http), outcomes)  # type: ignore[arg-type]
    assert view is not None and "not a JSON object" in view["router"]["error"]
    assert view["text"].startswith(f"router {base}: ") and all("error" in o.extras["router"] for o in outcomes)
