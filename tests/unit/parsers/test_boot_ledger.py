"""The boot ledger's parser: one start's journal lines to typed phases (tests/fixtures/sglang/boot/)."""

from __future__ import annotations

from pathlib import Path

from orchestrator.parsers.boot import KEEP_STARTS, BootStart, line_time, parse_boot, parse_boot_lines

FIX = Path(__file__).resolve().parents[2] / "fixtures" / "sglang"


def lines(name: str) -> list[str]:
    return (FIX / name).read_text().splitlines()


def seconds(start: BootStart) -> dict[str, float | None]:
    return {p.name: p.seconds for p in start.phases}


def test_standin_cold_start_compiles_inside_capture() -> None:
    """The stand-in's cold start, as the real one: no line of its own, the compile inside capture; the lines alone
    do not say cold or warm (the kernel-cache check or earlier starts do: tests/unit/test_real_server_h100.py)."""
    start = parse_boot(lines("boot/standin_cold.log"))
    assert start is not None and start.complete and start.cold is None
    assert start.total_s == 18
    assert seconds(start) == {"startup": 1, "weights": 4, "capture": 11, "warmup": 2}
    assert sum(s or 0 for s in seconds(start).values()) == start.total_s
    assert start.longest() is not None and start.longest().name == "capture"  # type: ignore[union-attr]
    assert start.summary() == "start 18 s (longest: capture 11 s)"


def test_autotune_without_capture_lines_and_other_ranks() -> None:
    start = parse_boot(lines("boot/autotune_no_capture.log"))
    assert start is not None and start.complete and start.cold is None  # autotune prints its line when warm too
    assert seconds(start) == {"startup": 3, "weights": 118, "autotune": 80, "warmup": 10}
    assert start.phase("capture") is None


def test_start_cut_off_mid_capture() -> None:
    start = parse_boot(lines("boot/cut_off.log"))
    assert start is not None and not start.complete and not start.cold
    assert start.total_s is None
    assert seconds(start) == {"startup": 5, "weights": 118, "capture": None}
    assert start.summary() == "start not finished (longest: weights 118 s)"


def test_healthy_before_the_ready_line_was_read_ends_at_the_last_line() -> None:
    start = parse_boot(lines("boot/standin_cold.log")[:-1], healthy=True)
    assert start is not None and start.complete and start.total_s == 16
    assert seconds(start) == {"startup": 1, "weights": 4, "capture": 11, "warmup": 0}


def test_real_benign_lines_make_a_warm_start_without_ready_line() -> None:
    start = parse_boot(lines("fatal/benign.log"))
    assert start is not None and not start.cold
    assert start.phase("weights") is not None and start.phase("capture") is not None


def test_journal_prefix_wins_over_sglang_stamp() -> None:
    t = line_time("2026-12-04T13:20:01.250000+00:00 ct sglang[12]: [2026-12-04 13:20:00 TP0] Load weight begin.")
    assert t is not None and t.microsecond == 250000
    start = parse_boot(["2026-12-04T13:20:01.250000+00:00 ct sglang[1]: Load weight begin.",
                        "2026-12-04T13:20:02.750000+00:00 ct sglang[1]: Load weight end.",
                        "2026-12-04T13:20:03.000000+00:00 ct sglang[1]: The server is fired up and ready to roll!"])
    assert start is not None and seconds(start) == {"startup": 0, "weights": 1.5, "warmup": 0.25}
    assert not start.cold


def test_no_start_lines_and_unstamped_lines() -> None:
    assert parse_boot([]) is None
    assert parse_boot(["Cache shape torch.Size([163840, 64])"]) is None
    assert parse_boot(["[2026-01-12 02:47:09] INFO:     127.0.0.1:33898 - \"GET /health HTTP/1.1\" 200 OK"]) is None


def test_boot_jsonl_bounded_and_tolerant() -> None:
    one = BootStart(started_at="2026-12-04T13:20:00", complete=True, total_s=3.0).model_dump_json()
    text = "\n".join([one] * (KEEP_STARTS + 5) + ["not json", ""])
    assert len(parse_boot_lines(text)) == KEEP_STARTS


def test_record_boot_script_appends_newest_last_and_keeps_the_bound(tmp_path: Path) -> None:
    """The container script (rendered as record_boot_script renders it, the current link moved under tmp)."""
    import base64
    import subprocess

    from orchestrator.scripts import render_script

    release = tmp_path / "releases" / "20261204T132402-fc94f37e"
    release.mkdir(parents=True)
    (tmp_path / "current").symlink_to(release)
    for i in range(5):
        line = BootStart(started_at=f"2026-12-04T13:2{i}:00", complete=True, total_s=float(i)).model_dump_json()
        script = render_script("record_boot.sh.j2", current_link=str(tmp_path / "current"),
                               b64=base64.b64encode((line + "\n").encode()).decode(), keep=3)
        subprocess.run(["bash", "-c", script], check=True)
    starts = parse_boot_lines((release / "boot.jsonl").read_text())
    assert [s.total_s for s in starts] == [2.0, 3.0, 4.0]
    assert oct((release / "boot.jsonl").stat().st_mode & 0o777) == "0o644"
    assert not list(release.glob("*.deploy-tmp"))
