"""The container's facts (`CT.x`): each its command (run in the container's one inner batch) and the parser that
makes its value; and the shell that builds the commands some steps also run on their own."""

from __future__ import annotations

from typing import Any

from orchestrator.facts.base import CtFact, of_stdout, q, read_with, text
from orchestrator.facts.host import p2p_matrix
from orchestrator.inventory.models import ServerProfile
from orchestrator.layout import PATHS
from orchestrator.parsers.boot import KEEP_STARTS, parse_boot_lines
from orchestrator.parsers.ct_gpus import CT_GPU_QUERY, CtGpus, parse_ct_gpus
from orchestrator.parsers.devices import parse_dev_listing
from orchestrator.parsers.leftovers import parse_leftovers
from orchestrator.parsers.listings import named_records, path_digests
from orchestrator.parsers.netaddr import address_command, net0_ifname, parse_ip_addr
from orchestrator.parsers.packages import DPKG_FORMAT, missing_packages
from orchestrator.parsers.server_process import parse_server_process
from orchestrator.parsers.topo import parse_topo
from orchestrator.parsers.weights import RECORD_PATH, parse_weights_check
from orchestrator.releases.documents import ReleaseMeta, ReleaseVerdict, StoredFlags, json_dict
from orchestrator.releases.store import current_release, parse_release_ids
from orchestrator.remote.batch import CommandOutput
from orchestrator.scripts import render_script
from orchestrator.stacks.kernel_caches import check_shell, parse_check
from orchestrator.stacks.lock import TARGET_PROGRAM, installed_dists, parse_target
from orchestrator.stacks.patches import PATCHED_FILES_PROGRAM, parse_patched_files
from orchestrator.stacks.stack import parse_stack_listing, parse_stack_usage, stack_usage_command
from orchestrator.verdicts.cache_disk import parse_usage, usage_command
from orchestrator.verdicts.toolchain import TOOLCHAIN_PROGRAM, parse_toolchain
from orchestrator.watchdog.parse import RESULT_MARK as WATCHDOG_RESULT_MARK
from orchestrator.watchdog.parse import parse_installed, parse_watchdog_fact

#: Debian packages the pipeline needs inside the container, which a stock debian-12-standard may lack:
#: python3 + python3-venv (the venv sglang lives in; ensurepip brings pip), curl (health facts and probes),
#: ca-certificates (https indexes, mirrors and the model hub). Checked in the facts round trip, installed by
#: the ct_packages step.
#: `patch` (GNU patch, priority optional: not in a stock debian-12/13-standard template) applies stack patches.
#: gcc and python3-dev (the headers of the container's own python3): real Triton compiles its CUDA driver module,
#: which includes Python.h, at the server's first kernel launch; g++: flashinfer's JIT builds with c++ (nvcc comes
#: from the stack or a CUDA toolkit: verdicts/toolchain.py).
CT_PACKAGES = ("ca-certificates", "curl", "patch", "python3", "python3-venv", "gcc", "g++", "python3-dev")
#: The watchdog's files as the `watchdog` fact lists them (orchestrator.watchdog.render writes them).
WATCHDOG_FILES = (PATHS.watchdog_script, PATHS.watchdog_config, PATHS.watchdog_unit_path, PATHS.watchdog_timer_path)


def health_code_command(p: ServerProfile) -> str:
    """curl's HTTP code of the server's /health ("000": no answer), waiting as long as sglang's /health may take
    under load (the profile's health_probe_timeout_s), so a slow answer is never read as a server that is down."""
    return (f"curl -s -o /dev/null -m {p.health_probe_timeout_s} -w '%{{http_code}}' "
            f"http://{q(p.host)}:{p.port}/health")


def sglang_version_command(venv: str) -> str:
    """The sglang version pip installed in `venv`: the `Version:` header of its `sglang-V.dist-info/METADATA`.

    Why not `python -c 'import sglang; print(sglang.__version__)'`: a real `import sglang` loads its frontend
    language and backends (numpy, requests, …), seconds of CPU on a node, and the container's facts wait for their
    slowest read. The record pip wrote is what `pip show sglang` and `importlib.metadata.version("sglang")` report,
    and it names the release a wheel was built from, as `__version__` does. No match (no venv, no sglang): sed's
    error and a non-zero exit, so the step installs. Only each file's header is read (`-s`: per file), and two
    dist-infos print two lines, which equal no pin.
    """
    return sglang_version_of(q(venv.rstrip('/')))


def sglang_version_of(venv_word: str) -> str:
    """sglang_version_command for a venv given as a shell word already quoted (`"$v"` in a loop)."""
    return (f"sed -s -n '1,/^$/ s/^Version: *//p' "
            f"{venv_word}/lib/python3*/site-packages/sglang-[0-9]*.dist-info/METADATA")


def current_stack_dists_command() -> str:
    """The distributions installed in the current release's stack venv (meta.json's `stack.venv`), one
    `name-version.dist-info` directory name a line; nothing for a release without a stack."""
    meta = q(f"{PATHS.current_link}/meta.json")
    return (f"v=$(sed -n 's/.*\"venv\": *\"\\([^\"]*\\)\".*/\\1/p' {meta} 2>/dev/null) && [ -n \"$v\" ] && "
            "for d in \"$v\"/lib/python3*/site-packages/*.dist-info; do [ -d \"$d\" ] && printf '%s\\n' \"${d##*/}\"; "
            "done; true")


def venv_dists_command(venv: str) -> str:
    """The distributions installed in `venv`, one `name-version.dist-info` directory name a line."""
    return (f"for d in {q(venv.rstrip('/'))}/lib/python3*/site-packages/*.dist-info; do [ -d \"$d\" ] && "
            "printf '%s\\n' \"${d##*/}\"; done; true")


def stacks_listing_command() -> str:
    """Every stack record in the container, one line each: the record's JSON, TAB, the sglang version pip's record
    in its venv names now (empty: the venv is gone), so a removed or broken venv is never taken for a stack."""
    return (f"if cd {q(PATHS.stacks_dir)} 2>/dev/null; then for f in *.json; do [ -f \"$f\" ] || continue; "
            "v=$(sed -n 's/.*\"venv\": *\"\\([^\"]*\\)\".*/\\1/p' \"$f\"); "
            f"printf '%s\\t%s\\n' \"$(tr -d '\\n' < \"$f\")\" \"$({sglang_version_of(chr(34) + '$v' + chr(34))} "
            "2>/dev/null | head -n 1)\"; done; fi")


def stack_patched_command() -> str:
    """Every stack record with patched files: each file's sha256 as recorded and as it is in the venv now (one
    JSON line). Python runs only when a record has patched files (a grep first): most containers have none."""
    records = f"{q(PATHS.stacks_dir)}/*.json"
    return (f"if grep -qs '\"patched\"' {records}; then python3 -c {q(PATCHED_FILES_PROGRAM)} "
            f"{q(PATHS.stacks_dir)}; fi; true")


def json_object(out: CommandOutput) -> dict[str, Any] | None:
    """A file holding one JSON object; None when absent/invalid."""
    return json_dict(out.stdout) if out.rc == 0 else None


def release_meta(out: CommandOutput) -> ReleaseMeta | None:
    """A release's meta.json (None: absent or unreadable)."""
    return ReleaseMeta.from_data(json_object(out))


def release_verdict(out: CommandOutput) -> ReleaseVerdict | None:
    """A release's verdict.json (None: absent, i.e. an unverified release, or unreadable)."""
    return ReleaseVerdict.from_data(json_object(out))


def release_flags(out: CommandOutput) -> StoredFlags | None:
    """A release's flags.json (None: absent or unreadable)."""
    return StoredFlags.from_data(json_object(out))


def _ct_gpus(out: CommandOutput) -> CtGpus:
    return parse_ct_gpus(out.stdout, out.stderr, out.rc)


def _sglang_version(out: CommandOutput) -> str | None:
    """The version pip's record names (None: no venv, no sglang)."""
    return (out.stdout.strip() or None) if out.rc == 0 else None


def _missing_pkgs(out: CommandOutput) -> list[str]:
    """The required packages dpkg does not list as installed (ParseError: dpkg-query's answer is not readable)."""
    return missing_packages(CT_PACKAGES, out.stdout, out.stderr, out.rc)


class CT:
    """The container's facts."""

    # The device nodes the running CT got at its start: a driver reload on the host since then leaves them stale.
    dev_listing = CtFact("dev_listing", lambda h, p: "ls -l /dev/nvidia*", of_stdout(parse_dev_listing))
    # The GPUs the CT sees and its NVML userspace version: one nvidia-smi instead of `-L` plus a driver query.
    gpus = CtFact("gpus", lambda h, p: CT_GPU_QUERY, _ct_gpus)
    topo = CtFact("topo", lambda h, p: "nvidia-smi topo -m", read_with(parse_topo))
    p2p_read = CtFact("p2p_read", lambda h, p: "nvidia-smi topo -p2p r", p2p_matrix("read"))
    p2p_write = CtFact("p2p_write", lambda h, p: "nvidia-smi topo -p2p w", p2p_matrix("write"))
    sglang_version = CtFact("sglang_version", lambda h, p: sglang_version_command(p.venv), _sglang_version)
    #: The software stacks built or adopted in the container (orchestrator/stacks.py), by sha.
    stacks = CtFact("stacks", lambda h, p: stacks_listing_command(),
                    lambda o: parse_stack_listing(o.stdout) if o.rc == 0 else {})
    #: Each patched stack's patched files: sha256 recorded at the build and now (a file changed behind the tool's
    #: back, orchestrator/patches.py).
    stack_patched = CtFact("stack_patched", lambda h, p: stack_patched_command(),
                           lambda o: parse_patched_files(o.stdout) if o.rc == 0 else {})
    #: What pip's records in the current release's stack venv say is installed (stack drift against its lock).
    stack_dists = CtFact("stack_dists", lambda h, p: current_stack_dists_command(), of_stdout(installed_dists))
    #: With constraints: what pip's records in the profile's own venv say is installed (a venv pip filled without
    #: the constraints is adopted as the constrained stack only when it meets them).
    venv_dists = CtFact("venv_dists", lambda h, p: venv_dists_command(p.venv) if p.constraints else "true",
                        of_stdout(installed_dists))
    #: What a real sglang's first start compiles with (orchestrator/verdicts/toolchain.py): C/C++ compilers, the
    #: Python headers, nvcc where the profile's CUDA_HOME (else the container's lookups) says.
    toolchain = CtFact("toolchain", lambda h, p: (
        f"python3 -c {q(TOOLCHAIN_PROGRAM)} {q(p.env.get('CUDA_HOME', ''))} {q(p.venv)} "
        f"{q(PATHS.stacks_dir + '/*')}"), of_stdout(parse_toolchain))
    #: With a lock: the interpreter and platform of the container's python3, which the lock must have been resolved
    #: for (cp311 wheels do not install on cp313; nothing read without a lock).
    python_target = CtFact("python_target", lambda h, p: (
        f"python3 -c {q(TARGET_PROGRAM)}" if p.lock_text is not None else "true"), of_stdout(parse_target))
    #: The managed pip cache beside the stacks: its bytes and the container filesystem's free space (doctor).
    pip_cache_usage = CtFact("pip_cache_usage", lambda h, p: usage_command(PATHS.pip_cache_dir), of_stdout(parse_usage))
    #: With a stacks_disk_budget_gb: bytes per stack and the newest verified release's stack (nothing read without).
    stack_usage = CtFact("stack_usage", lambda h, p: (
        stack_usage_command() if p.stacks_disk_budget_gb is not None else "true"), of_stdout(parse_stack_usage))
    # Complete weights, not just config.json: every file of deploy's record of the download (with sizes), or the
    # shards the index names (orchestrator.parsers.weights).
    weights = CtFact("weights", lambda h, p: (
        render_script("weights_check.sh.j2", model_path=p.model_path, record_path=RECORD_PATH)),
        of_stdout(parse_weights_check))
    missing_pkgs = CtFact("missing_pkgs", lambda h, p: (
        f"dpkg-query -W -f {q(DPKG_FORMAT)} {' '.join(map(q, CT_PACKAGES))}"), _missing_pkgs)
    # Body hashes by path: the managed `# deploy:` header (release id) is excluded, as in render.files.body_sha256;
    # empty while either file is missing.
    unit_sha = CtFact("unit_sha", lambda h, p: " ; ".join(
        f"printf '%s %s\\n' \"$(awk 'BEGIN{{h=1}} h && /^# deploy:/ {{next}} {{h=0; print}}' {f} | sha256sum "
        f"| cut -d' ' -f1)\" {f}" for f in (PATHS.unit_path, PATHS.env_path))
        + f" ; test -f {PATHS.unit_path} -a -f {PATHS.env_path}", lambda o: path_digests(o.stdout) if o.rc == 0 else {})
    #: The release `current` points at (None: no release yet).
    current_release = CtFact("current_release", lambda h, p: f"readlink {PATHS.current_link}",
                             lambda o: current_release(o.stdout) if o.rc == 0 else None)
    releases = CtFact("releases", lambda h, p: f"ls -1 {PATHS.releases_dir}",
                      lambda o: parse_release_ids(o.stdout) if o.rc == 0 else [])
    current_meta = CtFact("current_meta", lambda h, p: f"cat {PATHS.current_link}/meta.json", release_meta)
    current_verdict = CtFact("current_verdict", lambda h, p: f"cat {PATHS.current_link}/verdict.json",
                             release_verdict)
    #: The current release's boot ledger (boot.jsonl): its starts' phases, newest last (orchestrator.parsers.boot).
    current_boot = CtFact("current_boot", lambda h, p: f"tail -n {KEEP_STARTS} {PATHS.current_link}/boot.jsonl",
                          lambda o: parse_boot_lines(o.stdout) if o.rc == 0 else [])
    #: The current release's kernel cache, looked at (never changed): warm, absent or failing its check
    #: (orchestrator/caches.py); None for a release without a managed cache (an earlier deploy's, or no release).
    kernel_cache = CtFact("kernel_cache", lambda h, p: check_shell(f"{PATHS.current_link}/meta.json", look=True),
                          lambda o: parse_check(o.stdout))
    current_flags = CtFact("current_flags", lambda h, p: f"cat {PATHS.current_link}/flags.json", release_flags)
    # The last record of every plain bench run of the current release (file name, record JSON): roll baselines.
    current_bench = CtFact("current_bench", lambda h, p: (
        f"cd {PATHS.current_link} && for f in $(ls -1 bench-*--*.jsonl 2>/dev/null | sort); "
        "do printf '%s\\t' \"$f\"; tail -n 1 \"$f\"; done"), lambda o: named_records(o.stdout) if o.rc == 0 else [])
    # Not a read: stops the benches a dead run left behind, and names them. Gathered only by runs that hold the
    # host lock (steps.session.ensure_facts), so it costs no round trip of its own.
    stop_leftovers = CtFact("stop_leftovers", lambda h, p: (
        render_script("stop_leftovers.sh.j2", runs_dir=PATHS.runs_dir)), of_stdout(parse_leftovers))
    active = CtFact("active", lambda h, p: f"systemctl is-active {PATHS.unit_name}", text)
    # the container's address on the site network (a DHCP lease is known only inside): orchestrator.parsers.netaddr
    ct_address = CtFact("ct_address", lambda h, p: address_command(net0_ifname(h.container.net0)),
                        of_stdout(parse_ip_addr))
    enabled = CtFact("enabled", lambda h, p: f"systemctl is-enabled {PATHS.unit_name}", text)
    main_pid = CtFact("main_pid", lambda h, p: f"systemctl show -p MainPID --value {PATHS.unit_name}", text)
    # The running server: its pid, unit state and systemd's own restarts, then its argv one word a line (no
    # secret: those reach sglang by --config).
    server_process = CtFact("server_process", lambda h, p: (
        f"s=$(systemctl show -p MainPID -p ActiveState -p NRestarts {PATHS.unit_name}); echo \"$s\"; echo --; "
        "p=$(echo \"$s\" | sed -n 's/^MainPID=//p'); "
        "[ \"${p:-0}\" = 0 ] || tr '\\0' '\\n' < \"/proc/$p/cmdline\""), of_stdout(parse_server_process))
    #: /health's HTTP code ("000": no answer).
    health = CtFact("health", lambda h, p: health_code_command(p), text)

    # The watchdog's installed files ("PATH MODE BODY-SHA256" each, header excluded), its timer's state and
    # its last check's systemd Result.
    watchdog = CtFact("watchdog", lambda h, p: " ; ".join(
        f"printf '%s %s %s\\n' {f} \"$(stat -c %a {f} 2>/dev/null)\" \"$(awk 'BEGIN{{h=1}} h && /^# deploy:/ "
        f"{{next}} {{h=0; print}}' {f} 2>/dev/null | sha256sum | cut -d' ' -f1)\"" for f in WATCHDOG_FILES)
        + " ; printf 'timer %s %s\\n' \"$(systemctl is-active sglang-watchdog.timer)\" "
          "\"$(systemctl is-enabled sglang-watchdog.timer 2>/dev/null)\" ; printf 'last %s\\n' "
          "\"$(systemctl show -p Result --value sglang-watchdog.service 2>/dev/null)\"", of_stdout(parse_installed))
    # The state file, then the last check's systemd Result (a check that fails leaves a stale file behind).
    watchdog_state = CtFact("watchdog_state", lambda h, p: (
        f"cat {PATHS.watchdog_state} 2>/dev/null; printf '\\n{WATCHDOG_RESULT_MARK}\\n'; "
        "systemctl show -p Result --value sglang-watchdog.service 2>/dev/null; true"),
        lambda o: parse_watchdog_fact(o.stdout if o.rc == 0 else None))


__all__ = ["CT", "CT_PACKAGES", "WATCHDOG_FILES", "current_stack_dists_command", "health_code_command",
           "json_object", "release_flags", "release_meta", "release_verdict", "sglang_version_command",
           "sglang_version_of", "stacks_listing_command"]
