"""The in-container watchdog through the real CLI over SSH: `up` installs it; a server that stops serving while
/health stays 200 (the stand-in's stall_after) is restarted by the container itself and serves again; past the
restart budget the watchdog gives up, and `status` and `history` say so.

Timers are shortened through the profile (watchdog.interval_s and friends); the defaults are docs/gates.md's.
"""

from __future__ import annotations

import json
import shlex
import threading
from collections.abc import Callable
from typing import TypeVar

from tests.e2e.conftest import DeployEnv, until

T = TypeVar("T")

FAST = {"interval_s": 2, "stall_s": 6, "probe_timeout_s": 3, "restart_budget": 2, "budget_window_s": 3600}


def watchdog_state(env: DeployEnv) -> dict:  # type: ignore[type-arg]
    """The state file as the container holds it, read with the plain ssh client (not the tool)."""
    res = env.ct("cat /var/lib/deploy/watchdog/state.json")
    return dict(json.loads(res.stdout)) if res.rc == 0 and res.stdout.strip() else {}


def read_journal(env: DeployEnv) -> str:
    """The watchdog's and the server's last lines and the server's counters: what a failed wait shows."""
    return env.ct("journalctl -u sglang-watchdog -u sglang -o cat --no-pager | grep -v server_args "
                  "| grep -v 'watchdog.service' | tail -n 40; "
                  "curl -s http://127.0.0.1:8000/metrics | grep -v '^#'").stdout


def test_a_stalled_server_is_restarted_by_the_container_until_the_budget_is_spent(deploy_env: DeployEnv) -> None:
    env = deploy_env
    env.set_profile(watchdog=FAST)
    up = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert up.rc == 0, up.text
    step = next(s for s in up.json["steps"] if s["name"] == "watchdog")
    assert step["status"] == "changed" and "every 2 s" in step["summary"]
    mode = env.ct("stat -c %a /var/lib/deploy/watchdog /var/lib/deploy/watchdog/config.json").stdout.split()
    assert mode == ["700", "600"]
    assert until(lambda: watchdog_state(env).get("state") == "ok", 30)
    again = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert next(s for s in again.json["steps"] if s["name"] == "watchdog")["status"] == "ok", again.text

    # The server's next start stops serving after 3 finished generations (the watchdog's own tiny ones): requests
    # hang, the token counters stop, /health stays 200. Every restarted server does the same again.
    env.ct_faults(stall_after=3)
    assert env.ct("systemctl restart sglang").rc == 0

    # No one but the container acts: the first restart comes by itself, and the new server answers again.
    assert until(lambda: [a["action"] for a in watchdog_state(env).get("actions", [])] == ["restart"], 90), \
        (watchdog_state(env), read_journal(env))
    journal = until(lambda: (lambda t: t if "ok: a tiny generation answered" in t.split("restarting sglang")[-1]
                             else None)(env.ct("journalctl -u sglang-watchdog -o cat --no-pager").stdout), 60)
    assert "no token counter moved" in journal

    # The next stalls spend the budget (2 an hour here): the watchdog gives up and stops restarting.
    final = until(lambda: (lambda s: s if s.get("state") == "exhausted" else None)(watchdog_state(env)), 120)
    assert [a["action"] for a in final["actions"]] == ["restart", "restart", "gave-up"]
    assert "giving up" in env.ct("journalctl -u sglang-watchdog -o cat --no-pager").stdout

    status = env.run("--json", "status", "host", env.host)
    assert status.rc == 1, status.text  # /health is 200, but the server is stuck and nothing will restart it
    wd = status.json["watchdog"]
    assert wd["state"] == "exhausted" and wd["restarts_in_window"] == 2 and wd["restart_budget"] == 2
    assert [a["action"] for a in wd["actions"]] == ["restart", "restart", "gave-up"]
    assert status.json["health"] == "200"
    text = env.run("status", "host", env.host)
    assert text.rc == 1 and "watchdog: exhausted" in text.stdout and "gave up restarting" in text.stdout

    history = env.run("--json", "history", "host", env.host)
    assert history.rc == 0, history.text
    restarts = [a for a in history.json["watchdog"]["actions"] if a["action"] == "restart"]
    assert len(restarts) == 2 and all(a["at"].endswith("Z") for a in restarts)
    assert "watchdog actions on" in env.run("history", "host", env.host).stdout



def generate_loop(seconds: int) -> str:
    """Small generations one after another for `seconds`, each one's HTTP code printed (the key from sglang.env)."""
    return ("KEY=$(sed -n 's/^SGLANG_API_KEY=//p' /etc/sglang/sglang.env | tr -d '\"'); "
            f"end=$(( $(date +%s) + {seconds} )); while [ $(date +%s) -lt $end ]; do "
            "curl -s -o /dev/null -m 60 -w '%{http_code}\\n' ${KEY:+-H \"Authorization: Bearer $KEY\"} "
            "-H 'Content-Type: application/json' -d '{\"text\": \"w w\", \"sampling_params\": "
            "{\"max_new_tokens\": 4}}' http://127.0.0.1:8000/generate; done")


def test_without_metrics_a_busy_server_is_waiting_and_a_damaged_state_file_is_no_state(deploy_env: DeployEnv
                                                                                       ) -> None:
    """Issue 38 item 4: with enable-metrics off, a tiny generation that times out behind a long queue is no
    evidence of a stall (no counters to tell), so the server is never restarted; and the LOW item: a state file of
    the wrong JSON type is no state (said in the journal), and `status` fails while the checks themselves fail."""
    env = deploy_env
    env.set_profile(watchdog=FAST, flags={"enable-metrics": False})
    up = env.run("--json", "up", "host", env.host, "--skip-bench")
    assert up.rc == 0, up.text
    # Like real sglang without --enable-metrics: /metrics is FastAPI's 404, so the watchdog has no counters.
    assert env.ct("curl -s -w ' %{http_code}' http://127.0.0.1:8000/metrics").stdout == '{"detail":"Not Found"} 404'

    # Every prefill now takes 4 s: four clients keep a queue the 3 s tiny generation waits behind, for 40 s.
    env.ct_faults(slow_prefill_s=4)
    assert env.ct("systemctl stop sglang-watchdog.timer; rm -f /var/lib/deploy/watchdog/state.json; "
                  "systemctl restart sglang").rc == 0
    assert until(lambda: env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health"
                                ).stdout == "200", 90)
    # The checks are run one after another here (not by the timer), so that every one falls inside the load.
    checks = ("sleep 2; end=$(( $(date +%s) + 28 )); while [ $(date +%s) -lt $end ]; do "
              "systemctl start sglang-watchdog.service; sleep 1; done")
    load = env.ssh("pct exec 120 -- bash -c " + shlex.quote(
        f"for i in 1 2 3 4; do ( {generate_loop(40)} ) & done; ( {checks} ) >/dev/null 2>&1 & wait"), timeout=240)
    codes = load.stdout.split()
    assert codes and set(codes) == {"200"}, load.stdout  # every client request was served
    busy = watchdog_state(env)
    journal = env.ct("journalctl -u sglang-watchdog -o cat --no-pager | grep '^sglang-watchdog:'").stdout
    assert busy.get("actions", []) == [] and "restarting sglang" not in journal, (busy, journal)
    assert "client connection(s) are open" in journal and "enable-metrics off" in journal, journal
    assert busy["state"] == "waiting" and "client connection(s) are open" in busy["reason"], busy

    # A state file of the wrong JSON type: the next check starts from no state, says so, and writes a good one.
    env.ct_faults(slow_prefill_s=0)
    assert env.ct("systemctl restart sglang").rc == 0
    assert until(lambda: env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health"
                                ).stdout == "200", 90)
    assert env.ct("echo '[]' > /var/lib/deploy/watchdog/state.json; systemctl start sglang-watchdog.service").rc == 0
    assert "is not the watchdog's state" in env.ct("journalctl -u sglang-watchdog -o cat --no-pager").stdout
    assert watchdog_state(env).get("state") in ("ok", "waiting"), watchdog_state(env)
    assert env.run("status", "host", env.host).rc == 0

    # A check that fails (here its config is damaged) leaves its old state behind: status says nothing watches.
    assert env.ct("cd /var/lib/deploy/watchdog && cp config.json config.good && echo '{' > config.json && "
                  "systemctl start sglang-watchdog.service").rc != 0
    status = env.run("--json", "status", "host", env.host)
    assert status.rc == 1 and status.json["health"] == "200", status.text
    assert "Result=exit-code" in status.json["watchdog"]["failing"]
    text = env.run("status", "host", env.host)
    assert text.rc == 1 and "the watchdog is not watching" in text.stdout, text.text
    again = env.run("--json", "up", "host", env.host, "--skip-bench")  # the config is put back
    assert again.rc == 0, again.text
    assert env.ct("systemctl start sglang-watchdog.service").rc == 0
    assert env.run("status", "host", env.host).rc == 0


def test_a_health_that_blocks_behind_a_long_prefill_reads_slow_not_down(deploy_env: DeployEnv) -> None:
    """Issue 36 item 4: sglang's /health waits for the scheduler's next output, so behind an 8 s prefill it answers
    after about 8 s. `status` (like the health wait and the watchdog) waits the profile's health probe timeout
    (SGLANG_HEALTH_CHECK_TIMEOUT 20 s + 5), not 5 s, and reads the server as healthy."""
    env = deploy_env
    up = env.run("up", "host", env.host, "--skip-bench")
    assert up.rc == 0, up.text
    env.ct_faults(slow_prefill_s=8)
    assert env.ct("systemctl restart sglang").rc == 0
    assert until(lambda: env.ct("curl -s -o /dev/null -w '%{http_code}' http://127.0.0.1:8000/health"
                                ).stdout == "200", 90)

    def prefilling() -> bool:
        """A generation is in its prefill: /get_load counts its tokens but not the request (num_reqs is the running
        batch and the queue). A fixed 1.5 s sleep stood for this: on a loaded machine the generation's SSH and
        pct exec could take longer, and /health was then timed idle."""
        res = env.ct("KEY=$(sed -n 's/^SGLANG_API_KEY=//p' /etc/sglang/sglang.env | tr -d '\"'); "
                     "curl -s -m 10 ${KEY:+-H \"Authorization: Bearer $KEY\"} http://127.0.0.1:8000/get_load")
        try:
            load = json.loads(res.stdout)[0]
        except (ValueError, IndexError, KeyError):
            return False
        return bool(load["num_tokens"] > 0 and load["num_reqs"] == 0)

    def under_load(check: Callable[[], T]) -> T:
        load = threading.Thread(target=lambda: env.ct(generate_loop(2)))
        load.start()
        try:
            assert until(prefilling, 60, 0.2, 0.2), "the generation's prefill never ran"
            return check()
        finally:
            load.join()

    code, took = under_load(lambda: env.ct("curl -s -o /dev/null -w '%{http_code} %{time_total}' "
                                           "http://127.0.0.1:8000/health").stdout.split())
    assert code == "200" and float(took) > 5, (code, took)  # slower than the 5 s the probes used to wait
    status = under_load(lambda: env.run("--json", "status", "host", env.host))
    assert status.json["health"] == "200", status.text
    env.ct_faults(slow_prefill_s=0)
