"""SQLite ledger: schema version, round trips, listing, comparisons, imports, concurrent writers."""

from __future__ import annotations

import json
import re
import sqlite3
import threading
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from orchestrator.errors import ConfigError
from orchestrator.ledger.sqlite import SCHEMA_VERSION, Ledger, default_ledger_path, new_run_id
from orchestrator.parsers.bench import BenchResult
from orchestrator.parsers.gpu_query import Sample
from orchestrator.telemetry.summary import summarize
from orchestrator.verdicts.power import Diagnosis

T0 = datetime(2026, 11, 30, 2, 0, 0)


def bench(out: float, tpot: float = 100.0, rate: float = float("inf")) -> BenchResult:
    return BenchResult(source="jsonl", completed=1024, num_prompts=1024, failed=0, output_throughput=out,
                       mean_tpot_ms=tpot, mean_ttft_ms=900.0, request_rate=rate,
                       server_info={"tp_size": 8})


def test_run_id_shape() -> None:
    rid = new_run_id(datetime(2026, 11, 30, 2, 3, 55))
    assert re.fullmatch(r"r-20261130-020355-[0-9a-f]{4}", rid)


def test_default_path_follows_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    assert default_ledger_path() == tmp_path / "state" / "ledger.sqlite"


def test_schema_and_wal(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    assert led.schema_version() == SCHEMA_VERSION == 4
    conn = sqlite3.connect(tmp_path / "l.sqlite")
    assert conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    cols = [r[1] for r in conn.execute("PRAGMA table_info(runs)")]
    assert cols == ["id", "host", "release_id", "preset", "started_at", "flags_json", "bench_json",
                    "telemetry_json", "diagnosis_json", "source", "label", "jsonl_path", "verdict"]
    conn.close()
    Ledger(tmp_path / "l.sqlite")  # reopening is a no-op migration


def test_newer_schema_refused(tmp_path: Path) -> None:
    p = tmp_path / "l.sqlite"
    conn = sqlite3.connect(p)
    conn.execute("PRAGMA user_version = 99")
    conn.close()
    with pytest.raises(ConfigError, match="schema version 99"):
        Ledger(p)


def test_record_and_get_round_trip(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    samples = [Sample(ts=T0 + timedelta(seconds=i), gpu=0, values={"power.draw": 235.0, "power.limit": 600.0})
               for i in range(5)]
    tel = summarize(samples, output_tokens=1000, output_throughput=100.0)
    diag = [Diagnosis(code="gpus-idle", severity="warn", message="m", figures={"x": 1.5, "y": None})]
    rec = led.record_run(host="pve-gpu-1", bench=bench(3000.0), release_id="rel-1", preset="seed-1024x256",
                         started_at=T0, flags={"max-running-requests": 2048}, telemetry=tel, diagnosis=diag,
                         label="baseline", jsonl_path="/root/bench/a.jsonl")
    got = led.get_run(rec.id)
    assert got == rec
    assert got.bench is not None and got.bench.request_rate == float("inf")
    assert got.telemetry is not None and got.telemetry.gpus[0].power_pct_of_limit == pytest.approx(39.17, 0.01)
    assert led.get_run(rec.id[:-2]).id == rec.id  # unique prefix
    with pytest.raises(ConfigError, match="no run"):
        led.get_run("r-nope")


def test_list_and_compare(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    a = led.record_run(host="h1", bench=bench(3000.0, 100.0), started_at=T0)
    b = led.record_run(host="h1", bench=bench(3840.0, 98.0), started_at=T0 + timedelta(minutes=5), source="roll")
    led.record_run(host="h2", bench=bench(1.0), started_at=T0 + timedelta(minutes=9))
    assert [r.id for r in led.list_runs(host="h1")] == [b.id, a.id]
    assert len(led.list_runs()) == 3
    assert [r.host for r in led.list_runs(limit=1)] == ["h2"]
    assert [r.id for r in led.list_runs(source="roll")] == [b.id]
    rows = {r.metric: r for r in led.compare(a.id, b.id, noise_pct=5.0)}
    out = rows["output throughput (tok/s)"]
    assert (out.a, out.b, out.beyond_noise, out.better) == (3000.0, 3840.0, True, True)
    assert out.delta_pct == pytest.approx(28.0)
    tpot = rows["mean TPOT (ms)"]
    assert tpot.delta_pct == pytest.approx(-2.0) and not tpot.beyond_noise and tpot.better is None
    assert "J per output token" not in rows  # neither run has telemetry


def test_ambiguous_prefix(tmp_path: Path) -> None:
    led = Ledger(tmp_path / "l.sqlite")
    led.record_run(host="h", bench=bench(1.0), run_id="r-20261130-020000-aaaa")
    led.record_run(host="h", bench=bench(1.0), run_id="r-20261130-020000-aaab")
    with pytest.raises(ConfigError, match="several runs"):
        led.get_run("r-20261130-020000-aa")


def test_import_jsonl(tmp_path: Path) -> None:
    p = tmp_path / "sglang_1130_1024_128_256.jsonl"
    recs = [{"backend": "sglang", "completed": 1024, "output_throughput": v, "duration": 60.0, "tag": "x"}
            for v in (2900.0, 3100.0)]
    p.write_text("\n".join(json.dumps(r) for r in recs) + "\n")
    led = Ledger(tmp_path / "l.sqlite")
    runs = led.import_jsonl(p, host="elsewhere", num_prompts=1030)
    assert [r.bench.output_throughput for r in runs if r.bench] == [2900.0, 3100.0]
    assert all(r.source == "import" and r.jsonl_path == str(p.resolve()) and r.label == "x" for r in runs)
    assert runs[0].bench is not None and runs[0].bench.failed == 6
    assert [r.id for r in led.list_runs(host="elsewhere")] == [runs[1].id, runs[0].id]
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ConfigError, match="no bench_serving record"):
        led.import_jsonl(empty, host="h")


def test_concurrent_writers(tmp_path: Path) -> None:
    path = tmp_path / "l.sqlite"
    Ledger(path)
    errors: list[BaseException] = []

    def write(n: int) -> None:
        try:
            led = Ledger(path)
            for i in range(10):
                led.record_run(host=f"h{n}", bench=bench(float(i)))
        except BaseException as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(n,)) for n in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(Ledger(path).list_runs(limit=100)) == 40


def test_new_ledger_is_0600_in_a_0700_state_dir(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(tmp_path / "state"))
    led = Ledger()
    led.record_run(host="h", bench=bench(100.0), started_at=T0)
    assert (led.path.parent.stat().st_mode & 0o777) == 0o700
    for p in led.path.parent.iterdir():  # the database and its WAL / shared-memory files
        assert (p.stat().st_mode & 0o777) == 0o600, p


def test_existing_loose_ledger_is_tightened(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    state = tmp_path / "state"
    monkeypatch.setenv("DEPLOY_STATE_DIR", str(state))
    Ledger().record_run(host="h", bench=bench(100.0), started_at=T0)
    state.chmod(0o755)
    for p in state.iterdir():
        p.chmod(0o644)
    led = Ledger()
    assert (state.stat().st_mode & 0o777) == 0o700
    assert all((p.stat().st_mode & 0o777) == 0o600 for p in state.iterdir())
    assert len(led.list_runs()) == 1


def test_secrets_never_reach_the_ledger_file(tmp_path: Path) -> None:
    key = "sk-ledger-0123456789abcdef"
    led = Ledger(tmp_path / "l.sqlite")
    b = BenchResult(source="jsonl", completed=1, num_prompts=1, output_throughput=1.0,
                    server_info={"api_key": key, "admin_api_key": None, "tp_size": 8})
    rec = led.record_run(host="h", bench=b, flags={"api-key": key, "tp-size": 8}, started_at=T0)
    assert rec.bench is not None and rec.bench.server_info == {"api_key": "<redacted>", "admin_api_key": None,
                                                               "tp_size": 8}
    assert rec.flags == {"api-key": "<redacted>", "tp-size": 8}
    with sqlite3.connect(led.path) as conn:
        conn.execute("PRAGMA wal_checkpoint(FULL)")
    for p in tmp_path.iterdir():
        assert key.encode() not in p.read_bytes(), p
    # A row written by an older tool (key in clear) is redacted when read.
    with sqlite3.connect(led.path) as conn:
        conn.execute("UPDATE runs SET bench_json = ?", (b.model_dump_json(),))
    (old,) = led.list_runs()
    assert old.bench is not None and old.bench.server_info is not None
    assert old.bench.server_info["api_key"] == "<redacted>"


def test_a_run_id_drawn_twice_in_one_second_is_drawn_again(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """16 random bits per second collide when a fleet bench records many runs at once: the insert draws again,
    and a caller's own id is never silently replaced."""
    from orchestrator.ledger import sqlite as ledger_mod

    drawn = iter(["r-20261130-020000-aaaa", "r-20261130-020000-aaaa", "r-20261130-020000-bbbb"])
    monkeypatch.setattr(ledger_mod, "new_run_id", lambda _now=None: next(drawn))
    led = Ledger(tmp_path / "l.sqlite")
    first = led.record_run(host="h1", bench=bench(1.0), started_at=T0)
    second = led.record_run(host="h2", bench=bench(2.0), started_at=T0)
    assert (first.id, second.id) == ("r-20261130-020000-aaaa", "r-20261130-020000-bbbb")
    assert {r.host for r in led.list_runs()} == {"h1", "h2"}
    with pytest.raises(sqlite3.IntegrityError):
        led.record_run(host="h3", bench=bench(3.0), run_id=first.id)


def test_host_events_are_kept_per_host_oldest_first_and_redacted(tmp_path: Path) -> None:
    from orchestrator.redact import register_secret

    led = Ledger(tmp_path / "l.sqlite")
    register_secret("s3cr3t-token-value")
    led.record_event("sim-1", "cordoned", "xid 79 (reboot_host)")
    led.record_event("sim-2", "cordoned", "other host")
    led.record_event("sim-1", "remedied", "reboot in 9.4 s, key s3cr3t-token-value")
    events = led.events("sim-1")
    assert [e.kind for e in events] == ["cordoned", "remedied"]
    assert "s3cr3t-token-value" not in events[1].detail and "<redacted>" in events[1].detail
    assert [e.kind for e in led.events("sim-1", limit=1)] == ["remedied"]


def test_a_ledger_before_verdicts_upgrades_in_place(tmp_path: Path) -> None:
    """Schema 3 -> 4 (issue 47): the runs recorded before keep every field, and no verdict (no gate's word on them)."""
    from orchestrator.ledger.sqlite import MIGRATIONS

    p = tmp_path / "l.sqlite"
    conn = sqlite3.connect(p)
    for migration in MIGRATIONS[:3]:
        conn.executescript(migration)
    conn.execute("PRAGMA user_version = 3")
    conn.execute("INSERT INTO runs (id, host, started_at, source, bench_json) VALUES (?, ?, ?, ?, ?)",
                 ("r-20261130-020000-aaaa", "h", T0.isoformat(), "roll", bench(123.0).model_dump_json()))
    conn.commit()
    conn.close()
    led = Ledger(p)
    [old] = led.list_runs()
    assert led.schema_version() == 4 and old.verdict is None and old.source == "roll"
    assert old.bench is not None and old.bench.output_throughput == 123.0
    new = led.record_run(host="h", bench=bench(1.0), source="roll", verdict="rejected", started_at=T0)
    assert led.get_run(new.id).verdict == "rejected"
