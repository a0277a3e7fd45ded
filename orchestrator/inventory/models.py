"""Typed inventory: hosts, their container, server profiles and bench presets.

Every model forbids unknown keys, so a typo in YAML is an error naming the key instead of a silent default.
"""

from __future__ import annotations

import math
import os
import re
import stat
from pathlib import Path
from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, field_validator, model_validator

from orchestrator.errors import ConfigError, did_you_mean, unknown_name
from orchestrator.flags.limits import FlagValue, UnitTextError, flag_value_problem, text_problem
from orchestrator.inventory.net0 import GRAMMAR, net0_problem
from orchestrator.local.files import read_text_file
from orchestrator.redact import register_secret
from orchestrator.stacks.kernel_caches import host_cache_dir
from orchestrator.stacks.lock import parse_constraint
from orchestrator.stacks.stack import requirement

GateMetric = Literal["output_throughput", "mean_tpot_ms", "mean_ttft_ms"]
DEFAULT_GATE: tuple[GateMetric, ...] = ("output_throughput",)


#: A mirror, proxy or index URL: scheme, host, optional port and path; no credentials (they would travel in argv
#: and logs: give them in the container's own pip.conf / apt.conf instead), no spaces or quotes.
SITE_URL = re.compile(r"https?://[A-Za-z0-9._~-]+(:\d{1,5})?(/[A-Za-z0-9._~/%+-]*)?")


def site_url_problem(value: str) -> str | None:
    """Why `value` is not a usable mirror/proxy URL (None when it is)."""
    if "@" in value.split("://", 1)[-1].split("/", 1)[0]:
        return "must not carry credentials (user:password@): they would show in argv and logs"
    if not SITE_URL.fullmatch(value):
        return "must be an http:// or https:// URL: scheme, host, optional :port and path, e.g. http://10.0.0.5:3142"
    return None


def _site_url(value: str | None) -> str | None:
    problem = site_url_problem(value) if value is not None else None
    if problem:
        raise ValueError(f"{value!r} {problem}")
    return value


def directory_problem(path: str) -> str | None:
    """Why `path` is not an absolute, normalised directory other than / (None when it is)."""
    if not path.startswith("/") or path == "/":
        return "must be an absolute directory other than /"
    if any(part in (".", "..") for part in path.split("/")) or "//" in path:
        return "must be a normalised absolute path (no '.', '..' or '//')"
    return None


def mount_path_problem(path: str) -> str | None:
    """Why `path` cannot be one end of a PVE bind mount (`mpN: HOST,mp=CT`); None when it can."""
    problem = directory_problem(path)
    if problem:
        return problem
    if not re.fullmatch(r"[A-Za-z0-9._/+@-]+", path):
        return "may use letters, digits and . _ / + @ - only (no spaces, commas or '=' in a PVE mount point)"
    return None


#: Host directories a kernel cache may never be: `up` makes the cache directory the container root's, and before
#: issue 50 it chowned and chmodded whatever the inventory named (a node's /tmp lost its sticky bit and world write).
SYSTEM_DIRS = frozenset({"/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib64", "/media", "/mnt", "/opt", "/proc",
                         "/root", "/run", "/sbin", "/srv", "/sys", "/tmp", "/usr", "/var", "/var/cache", "/var/lib",
                         "/var/lib/vz", "/var/log", "/var/tmp", "/var/spool", "/var/mail", "/var/run",
                         "/var/lib/deploy", "/var/lib/deploy/kernel-cache"})
#: Trees nothing of the tool's may live in.
SYSTEM_TREES = ("/boot/", "/dev/", "/etc/", "/proc/", "/run/", "/sys/", "/usr/")


def kernel_cache_problem(path: str) -> str | None:
    """Why `path` cannot be a container's kernel cache directory on the node (None: it can)."""
    norm = "/" + "/".join(p for p in path.split("/") if p)
    if norm in SYSTEM_DIRS or norm.count("/") < 2 or norm.startswith(SYSTEM_TREES):
        return ("is a system directory (or a top-level one): `up` makes the cache directory the container "
                "root's; name a directory of its own, e.g. /tank/kernel-cache/120 (deploy creates it)")
    return None


class StrictModel(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class SecretRef(StrictModel):
    """A secret is named, never written inline: it comes from an env var or a file readable by its owner only."""

    env: str | None = None
    file: Path | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> SecretRef:
        if (self.env is None) == (self.file is None):
            raise ValueError("give exactly one of 'env' or 'file'")
        return self

    def describe(self) -> str:
        return f"env ${self.env}" if self.env else f"file {self.file}"

    def read(self) -> str:
        """The secret's value; it is registered with the redactor, so no output can carry it from here on."""
        value = self._read()
        register_secret(value)
        return value

    def _read(self) -> str:
        if self.env:
            value = os.environ.get(self.env)
            if not value:
                raise ConfigError(f"secret env var {self.env} is not set", fix=f"export {self.env}=…")
            return value
        assert self.file is not None
        path = self.file.expanduser()
        try:
            st = path.stat()
        except OSError as exc:
            raise ConfigError(f"secret file {path} cannot be read: {exc.strerror}",
                              fix="create it with mode 0600") from exc
        if st.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
            raise ConfigError(f"secret file {path} has mode {stat.S_IMODE(st.st_mode):04o}; "
                              "it must not be readable by group or others",
                              fix=f"chmod 600 {path}")
        return read_text_file(path, "secret file").strip()


class SshAccess(StrictModel):
    user: str = "root"
    port: int = Field(22, ge=1, le=65535)
    key_file: Path | None = None
    known_hosts: Path | None = None
    connect_timeout_s: float = Field(10.0, gt=0)


class PveApiAccess(StrictModel):
    """HTTPS API with a token: enough for lifecycle, not for devN passthrough (root@pam only)."""

    token_id: str
    token_secret: SecretRef
    port: int = Field(8006, ge=1, le=65535)
    verify: bool | Path = True
    timeout_s: float = Field(30.0, gt=0)

    @field_validator("token_id")
    @classmethod
    def _token_shape(cls, v: str) -> str:
        if not re.fullmatch(r"[^@!\s]+@[^@!\s]+![A-Za-z][A-Za-z0-9._-]*", v):
            raise ValueError("token_id must look like USER@REALM!TOKENNAME, e.g. root@pam!deploy")
        return v


class PveAccess(StrictModel):
    node: str
    api: PveApiAccess | None = None
    # pvesh/pct as root over the verified SSH connection: the only path that may set devN or raw lxc.* lines.
    root_ssh: bool = True

    @model_validator(mode="after")
    def _some_path(self) -> PveAccess:
        if self.api is None and not self.root_ssh:
            raise ValueError("no way to reach the PVE API: set 'api' or 'root_ssh: true'")
        return self


#: PVE's VMID range (pve-common's `pve-vmid`).
VMID_RANGE = (100, 999_999_999)


class ContainerSpec(StrictModel):
    # `vmid` in and out (model_dump gives what the inventory says), `vmid_setting` only in the code
    model_config = ConfigDict(extra="forbid", frozen=True, serialize_by_alias=True)

    #: `vmid:` in the inventory: a number, or `auto`: a free one from the cluster's `/cluster/nextid`, chosen by the
    #: first `up` and recorded on the node so it stays the same (orchestrator/steps/vmid.py). Read it as `vmid`.
    vmid_setting: int | Literal["auto"] = Field(alias="vmid")
    hostname: str
    ostemplate: str
    template_storage: str = "local"
    cores: int = Field(ge=1, le=8192)
    memory_mb: int = Field(ge=16)
    swap_mb: int = Field(0, ge=0)
    rootfs_storage: str = "local-lvm"
    rootfs_size_gb: int = Field(ge=1)
    net0: str = "name=eth0,bridge=vmbr0,ip=dhcp"
    unprivileged: bool  # required on purpose: PVE 9 flipped the API default
    features: dict[str, bool] = Field(default_factory=lambda: {"nesting": True})
    onboot: bool = True
    gpus: Literal["all"] | list[int] = "all"
    expected_gpus: int = Field(8, ge=1)
    passthrough: Literal["auto", "devN", "raw-lxc"] = "auto"
    # NVIDIA .run installer on the PVE host, used to install matching userspace in the container.
    driver_installer: str | None = None
    # Where the container gets its software (air-gapped sites name their own mirrors; unset: the defaults).
    apt_proxy: str | None = None  # apt-get -o Acquire::http::Proxy=URL
    pip_index_url: str | None = None  # pip --index-url (an http:// index is also passed as --trusted-host)
    hf_endpoint: str | None = None  # HF_ENDPOINT for `hf download` (a model hub mirror)
    # A host directory holding the model, bind-mounted as mpN at the profile's model_path (no download then).
    model_mount: str | None = None
    # The host directory bind-mounted at the container's kernel cache root (orchestrator/caches.py), so a rebuilt
    # container keeps its compiled kernels and autotune results; unset: /var/lib/deploy/kernel-cache/<vmid>.
    kernel_cache: str | None = None

    _resolved_vmid: int | None = PrivateAttr(None)

    @field_validator("vmid_setting", mode="before")
    @classmethod
    def _vmid(cls, v: object) -> object:
        if v == "auto":
            return v
        if isinstance(v, bool) or not isinstance(v, int) or not VMID_RANGE[0] <= v <= VMID_RANGE[1]:
            raise ValueError(f"{v!r}: a VMID is a number from {VMID_RANGE[0]} to {VMID_RANGE[1]}, or auto (a free one "
                             "from the cluster, recorded on the node by the first `deploy up`)")
        return v

    @property
    def vmid_auto(self) -> bool:
        return self.vmid_setting == "auto"

    @property
    def vmid(self) -> int:
        """The container's VMID: the inventory's number, or the one `vmid: auto` resolved to in this run."""
        if isinstance(self.vmid_setting, int):
            return self.vmid_setting
        if self._resolved_vmid is None:
            raise ConfigError("container.vmid is auto and this command has not resolved it (only a playbook that "
                              "connects to the host does)",
                              fix="run `deploy up` on the host (it chooses and records the VMID), or set vmid to "
                                  "that number in the inventory")
        return self._resolved_vmid

    def with_vmid(self, vmid: int) -> ContainerSpec:
        """This spec with `vmid: auto` resolved to `vmid` (a number in the inventory stays as it is)."""
        copy = self.model_copy()
        copy._resolved_vmid = vmid
        return copy

    @field_validator("apt_proxy", "pip_index_url", "hf_endpoint")
    @classmethod
    def _urls(cls, v: str | None) -> str | None:
        return _site_url(v)

    @field_validator("model_mount", "kernel_cache")
    @classmethod
    def _host_dir(cls, v: str | None) -> str | None:
        problem = mount_path_problem(v) if v is not None else None
        if problem:
            raise ValueError(f"{v!r} (a directory on the PVE host, e.g. /tank/models/GLM-5-NVFP4) {problem}")
        return v.rstrip("/") if v is not None else None

    @field_validator("kernel_cache")
    @classmethod
    def _not_a_system_dir(cls, v: str | None) -> str | None:
        problem = kernel_cache_problem(v) if v is not None else None
        if problem:
            raise ValueError(f"{v!r} {problem}")
        return v

    @property
    def kernel_cache_dir(self) -> str:
        """The host directory of this container's kernel caches: the inventory's, else one per VMID."""
        return self.kernel_cache or host_cache_dir(self.vmid)

    @field_validator("net0")
    @classmethod
    def _net0(cls, v: str) -> str:
        problem = net0_problem(v)
        if problem:
            raise ValueError(f"{v!r}: {problem}; PVE takes {GRAMMAR}")
        return v

    @field_validator("hostname")
    @classmethod
    def _dns_name(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?", v):
            raise ValueError("hostname must be a DNS label (letters, digits, '-')")
        return v

    @field_validator("ostemplate")
    @classmethod
    def _volid(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*:vztmpl/[^/\s]+", v):
            raise ValueError("ostemplate must be a volume id like local:vztmpl/debian-12-standard_12.12-1_amd64.tar.zst"
                             ", or a template family like local:vztmpl/debian-12-standard (the newest version in the "
                             "node's appliance index is taken)")
        return v

    @property
    def template_name(self) -> str:
        return self.ostemplate.split("/", 1)[1]

    @property
    def template_family(self) -> str | None:
        """`debian-12-standard` when ostemplate names a family (no version, no archive suffix); None when pinned."""
        name = self.template_name
        return None if re.search(r"\.tar\.(gz|xz|zst)$", name) else name


class SmokeCheck(StrictModel):
    prompt: str = "What is 17 + 25? Answer with the number only."
    expect_regex: str = r"\b42\b"
    max_tokens: int = Field(16, ge=1)
    timeout_s: float = Field(120.0, gt=0)


class GoldenPrompt(StrictModel):
    """One golden prompt: `text`, then `context` repeated `context_repeat` times (long context), then `question`."""

    name: str = Field(min_length=1, max_length=64, pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    text: str = Field(min_length=1)
    context: str = ""
    context_repeat: int = Field(0, ge=0, le=100_000)
    question: str = ""

    @property
    def full_text(self) -> str:
        return self.text + self.context * self.context_repeat + self.question


def shipped_golden_prompts() -> list[GoldenPrompt]:
    """The golden prompts shipped in the package (orchestrator/gates/golden.yaml)."""
    from orchestrator.local.yamlfile import parse_yaml  # the one YAML reader: libyaml, keys once, decoded once
    from orchestrator.resources import golden_prompts_file

    path = golden_prompts_file()
    return [GoldenPrompt.model_validate(p) for p in parse_yaml(path.read_text(), str(path))]


class CorrectnessGate(StrictModel):
    """The correctness gate (docs/gates.md): golden prompts at temperature 0, compared with the current release's
    record. The defaults tolerate batched-kernel nondeterminism (near-tie flips, logprobs moved by hundredths)."""

    enabled: bool = True
    prompts: list[GoldenPrompt] = Field(default_factory=shipped_golden_prompts, min_length=1)
    max_new_tokens: int = Field(32, ge=1, le=4096)
    top_logprobs: int = Field(5, ge=2, le=20)
    prefix_tokens: int = Field(16, ge=1)
    tie_margin: float = Field(0.5, ge=0)
    max_logprob_delta: float = Field(0.5, gt=0)
    mean_logprob_delta: float = Field(0.1, gt=0)
    max_repeat_run: int = Field(8, ge=2)
    timeout_s: float = Field(120.0, gt=0)

    @field_validator("prompts")
    @classmethod
    def _unique(cls, v: list[GoldenPrompt]) -> list[GoldenPrompt]:
        names = [p.name for p in v]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"golden prompt names must be unique: {', '.join(dup)} given twice")
        return v


class WatchdogSettings(StrictModel):
    """The in-container watchdog (docs/gates.md, "Watchdog"): a check every `interval_s`; sglang is restarted when
    /health answers but a tiny generation fails and no token counter moved for `stall_s`, at most `restart_budget`
    times per `budget_window_s`. The defaults notice a stall within 60 s; tests shorten them."""

    enabled: bool = True
    interval_s: int = Field(10, ge=1, le=3600)
    stall_s: int = Field(30, ge=1)
    probe_timeout_s: int = Field(10, ge=1)
    restart_budget: int = Field(3, ge=0)
    budget_window_s: int = Field(3600, ge=60)


#: sglang's default SGLANG_HEALTH_CHECK_TIMEOUT (http_server.health_generate), and what a probe waits beyond it.
SGLANG_HEALTH_CHECK_TIMEOUT_S = 20
HEALTH_MARGIN_S = 5


class ServerProfile(StrictModel):
    """What runs in the container: one sglang launch, pinned to the sglang version its flags are written for."""

    model_path: str
    weights_repo: str | None = None
    #: The hub revision (branch, tag or commit) of weights_repo to download; resolved to its commit at download.
    weights_revision: str = "main"
    served_model_name: str
    tokenizer: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(8000, ge=1, le=65535)
    venv: str = "/root/ml-env"
    sglang_version: str
    # pip extras installed with sglang (`sglang[srt]==VERSION`); empty: plain `sglang==VERSION`.
    sglang_extras: list[str] = Field(default_factory=list)
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    api_key: SecretRef | None = None
    #: The model hub token for a gated or private weights_repo (`hf download` reads it from a 0600 file in the
    #: container, never from argv); a host's own hf_token wins over it.
    hf_token: SecretRef | None = None
    #: Flags whose values are secrets although sglang's schema does not say so (it marks admin-api-key,
    #: ssl-keyfile-password): sglang reads them from the 0600 secrets.yaml, never from argv.
    secret_flags: list[str] = Field(default_factory=list)
    start_timeout_s: int = Field(900, ge=1)
    #: How long one /health probe may take. sglang's /health generates one token and waits for the scheduler's next
    #: output for up to SGLANG_HEALTH_CHECK_TIMEOUT (20 s; `env` may set it) before it answers 503, so under a long
    #: prefill it is slow, not down. None: that timeout + HEALTH_MARGIN_S.
    health_timeout_s: int | None = Field(None, ge=1, le=3600)
    #: The unit's TimeoutStopSec: on SIGTERM sglang answers 503 and waits (in 5 s steps, with no bound) until its
    #: in-flight requests are done; systemd kills what is left after this many seconds, cutting those streams.
    stop_timeout_s: int = Field(120, ge=1)
    bench_preset: str = "seed-1024x256"
    min_output_throughput: float | None = Field(None, ge=0)
    regression_threshold_pct: float = Field(5.0, ge=0, le=100)
    #: A stored baseline older than this is measured again by the roll: the machine's load, driver and clocks
    #: move, and a week-old figure judges the candidate against a machine that no longer exists.
    baseline_max_age_h: float = Field(24.0, gt=0)
    #: Bench runs of a roll's throughput step; the gate judges their median (a noisy machine, no false revert).
    gate_repeats: int = Field(1, ge=1, le=10)
    # What the roll gate holds against the baseline (TPOT/TTFT deltas are always reported).
    gate_metrics: list[GateMetric] = Field(default_factory=lambda: list(DEFAULT_GATE), min_length=1)
    keep_releases: int = Field(10, ge=2)
    #: Software stacks (venvs under /opt/deploy/stacks) kept in the container, besides those of the current and the
    #: newest verified release and the profile's own venv, which are never removed (docs/stacks.md).
    keep_stacks: int = Field(3, ge=1)
    #: The bytes the kept stacks may take (GB = 10^9 bytes, `du -sb`): a build also prunes the oldest prunable
    #: stacks until they fit, and a new stack that cannot fit even then is refused before any change (docs/stacks.md).
    stacks_disk_budget_gb: float | None = Field(None, gt=0, allow_inf_nan=False)
    #: Set by the inventory loader from `locks/<profile>.txt` beside the inventory files, never written in YAML:
    #: the stack's lock (orchestrator/stack_lock.py; `deploy lock` writes it).
    lock_file: str | None = None
    lock_text: str | None = None
    #: Unified diffs applied to the stack venv's site-packages when the stack is built, in this order: paths relative
    #: to the inventory directory of the file that defines the profile (shipped with it). Their content is part of
    #: the stack's identity: a changed or added patch builds another stack (docs/stacks.md#patches).
    patches: list[str] = Field(default_factory=list)
    #: Set by the inventory loader, never written in YAML: each patch's text by its name in `patches`.
    patch_texts: dict[str, str] = Field(default_factory=dict)
    #: Pins below sglang (pip constraints: `kernels<0.15`): what sglang leaves open and a newer release on the index
    #: breaks (sglang 0.5.12.post1 requires `kernels` unpinned). Part of the stack's identity and of its lock
    #: (docs/stacks.md#constraints).
    constraints: list[str] = Field(default_factory=list)
    smoke: SmokeCheck = Field(default_factory=SmokeCheck)
    correctness: CorrectnessGate = Field(default_factory=CorrectnessGate)
    watchdog: WatchdogSettings = Field(default_factory=WatchdogSettings)

    @property
    def health_probe_timeout_s(self) -> int:
        """The seconds a /health probe waits before it reads the server as not answering (health_timeout_s)."""
        if self.health_timeout_s is not None:
            return self.health_timeout_s
        try:
            upstream = float(self.env.get("SGLANG_HEALTH_CHECK_TIMEOUT", SGLANG_HEALTH_CHECK_TIMEOUT_S))
        except ValueError:
            upstream = SGLANG_HEALTH_CHECK_TIMEOUT_S
        return int(max(upstream, 0)) + HEALTH_MARGIN_S

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, v: dict[str, FlagValue]) -> dict[str, FlagValue]:
        for key in v:
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", key):
                raise ValueError(f"flag {key!r}: write long names without leading dashes, e.g. tp-size")
        for owned in ("model-path", "served-model-name", "port", "host", "api-key"):
            if owned in v:
                raise ValueError(f"flag {owned!r} comes from the profile's own field; remove it from flags")
        for key, value in v.items():
            problem = flag_value_problem(value)
            if problem:
                raise UnitTextError(f"flag {key!r}: {problem}", key)
        return v

    @field_validator("sglang_extras")
    @classmethod
    def _extras(cls, v: list[str]) -> list[str]:
        for extra in v:
            if not re.fullmatch(r"[A-Za-z0-9]([A-Za-z0-9._-]*[A-Za-z0-9])?", extra):
                raise ValueError(f"sglang_extras: {extra!r} is not a pip extra name (letters, digits, . _ -)")
        return v

    @field_validator("constraints")
    @classmethod
    def _constraints(cls, v: list[str]) -> list[str]:
        return [parse_constraint(c).text for c in v]

    @property
    def sglang_requirement(self) -> str:
        """The pip requirement for the pinned sglang, with its extras: `sglang[srt]==0.5.23`."""
        return requirement(self.sglang_version, self.sglang_extras)

    @field_validator("env")
    @classmethod
    def _env_names(cls, v: dict[str, str]) -> dict[str, str]:
        for key in v:
            if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
                raise ValueError(f"env name {key!r} is not a valid variable name")
            problem = text_problem(v[key])
            if problem:
                raise UnitTextError(f"env {key}: {problem}", key)
        return v

    @field_validator("model_path", "served_model_name", "tokenizer", "weights_repo")
    @classmethod
    def _unit_text(cls, v: str | None) -> str | None:
        problem = text_problem(v) if v is not None else None
        if problem:
            raise UnitTextError(problem)
        return v

    @field_validator("model_path")
    @classmethod
    def _model_dir(cls, v: str) -> str:
        """The weights' directory in the container: `hf download --local-dir` writes there and the weights check
        reads it, so a relative `../../etc` (from the container command's working directory) is refused."""
        problem = directory_problem(v)
        if problem:
            raise ValueError(f"{v!r} (the weights' directory in the container, e.g. /models/GLM-5-NVFP4) {problem}")
        return v.rstrip("/")


#: A bench request's allowance: a start (queueing, prefill) and a slow decode step per output token (2 tok/s).
REQUEST_START_S = 60.0
SLOW_TPOT_S = 0.5


class BenchPreset(StrictModel):
    """One bench_serving run. random_range_ratio has no default: bench_serving's own (0) halves mean lengths."""

    dataset_name: Literal["random", "random-ids", "sharegpt"] = "random-ids"
    dataset_path: str | None = None
    random_input_len: int = Field(ge=1)
    random_output_len: int = Field(ge=1)
    random_range_ratio: float = Field(ge=0, le=1)
    num_prompts: int = Field(ge=1)
    request_rate: float | Literal["inf"] = "inf"
    max_concurrency: int | None = Field(None, ge=1)
    seed: int = 1
    warmup_requests: int = Field(1, ge=0)
    backend: Literal["sglang", "sglang-oai", "sglang-oai-chat"] = "sglang"
    #: The most a run may take. Unset: derived from the preset's shape (`limit_s`), at most this default.
    timeout_s: float = Field(1800.0, gt=0)
    #: The share of its requests a run may lose and still count (docs/bench.md, "Failed requests"): past it the
    #: run is a failed bench (`deploy bench` exits 1, a tune run misses its SLO). 0: any failed request fails it.
    max_failed_fraction: float = Field(0.01, ge=0, lt=1)

    @property
    def limit_s(self) -> float:
        """How long a run of this preset may take: `timeout_s` when the preset sets it, else its shape's bound.

        The prompts arrive over num_prompts / request_rate seconds, then run in waves of max_concurrency (one wave
        when unbounded), each request allowed REQUEST_START_S plus SLOW_TPOT_S per output token; the warmup
        requests are one wave more.
        """
        if "timeout_s" in self.model_fields_set:
            return self.timeout_s
        arrival_s = 0.0 if self.request_rate == "inf" else self.num_prompts / float(self.request_rate)
        waves = math.ceil(self.num_prompts / self.max_concurrency) if self.max_concurrency else 1
        waves += 1 if self.warmup_requests else 0
        per_request_s = REQUEST_START_S + SLOW_TPOT_S * self.random_output_len
        return min(self.timeout_s, arrival_s + waves * per_request_s)


class Host(StrictModel):
    name: str
    address: str
    ssh: SshAccess = Field(default_factory=SshAccess)
    pve: PveAccess
    container: ContainerSpec
    profile: str
    #: The model hub token this host downloads with (a site's own account): wins over its profile's hf_token.
    hf_token: SecretRef | None = None
    #: The shipped example's host (`deploy init`): its address is a worked example, not a machine of this site, so
    #: the tool refuses to connect to it until the operator has put in their own address and removed the key.
    example: bool = False
    #: The GPUs' power limit in watts this host keeps (`nvidia-smi -pl`, persisted by a host unit: docs/power.md);
    #: None leaves each GPU at the limit it has. Checked against the GPUs' own min/max once they are read, before
    #: any change.
    power_limit_w: int | None = Field(default=None, ge=1, le=5000)

    def require_configured(self) -> None:
        """Refuse (exit 2, before any connection) to reach a host that is still the example's."""
        if self.example:
            raise ConfigError(
                f"host {self.name} is the example inventory's host ({self.address} is the worked example's address, "
                "not a machine of yours): nothing was contacted",
                fix=f"edit its entry in your inventory's hosts.yaml: set your node's address, then delete the line "
                    f"`example: true` under {self.name}")

    @field_validator("name")
    @classmethod
    def _name_shape(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9_.-]*", v):
            raise ValueError("host name may use letters, digits, '.', '_' and '-'")
        return v

    @field_validator("address")
    @classmethod
    def _address_shape(cls, v: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9.:-]+", v):
            raise ValueError("address must be an IP address or a DNS name")
        return v


def hf_token_for(host: Host, profile: ServerProfile) -> SecretRef | None:
    """The hub token `host` downloads its profile's weights with: the host's own, else the profile's (or none)."""
    return host.hf_token or profile.hf_token


HostName = Annotated[str, Field(min_length=1)]
#: A profile's name: a file name of its own (`deploy lock` writes locks/<name>.txt), never a path.
PROFILE_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")
RouterPolicy = Literal["random", "round_robin", "cache_aware", "power_of_two", "manual"]
#: The router packages deploy drives (one adapter, orchestrator/router/release.py): the SGLang Model Gateway
#: (`smg`, its name since 2026) and the last `sglang-router` release.
RouterPackage = Literal["sglang-router", "smg"]
#: The release pinned when the inventory names a package and no version.
ROUTER_DEFAULT_VERSION: dict[str, str] = {"sglang-router": "0.3.2", "smg": "1.13.0"}
#: Router options that come from the router section's own fields, never from its flags.
ROUTER_OWNED_FLAGS = ("worker-urls", "host", "port", "policy", "api-key")


class RouterSpec(StrictModel):
    """SGLang's own router (smg, the SGLang Model Gateway; or sglang-router 0.3.2) in front of the fleet's servers.

    `runs_on: HOST`: `deploy up` on a fleet converges it in container `vmid` of that inventory host (default: the
    host's server container), in its own venv, as a systemd unit rendered from templates/sglang-router.service.j2,
    with its flags checked against the installed router's own argparse parser (version pinned here). A container,
    not the PVE node: operators keep the hypervisor free of services of their own. `runs_on: operator`: the
    operator runs it on this machine; deploy only talks to it (status, bench, drains). Workers are the servers of
    `workers` (a group; default every host), at http://CT_ADDRESS:PORT (the server container's own address on the
    site network, profile port) unless `worker_urls` names another URL for a host. A router in a container binds
    0.0.0.0 unless `host` says otherwise: clients reach it at its container's address.
    """

    runs_on: str = "operator"
    #: The container on `runs_on` the router runs in; default the host's server container (container.vmid).
    vmid: int | None = Field(None, ge=100, le=999999999)
    #: Which router: `smg` (the SGLang Model Gateway, the default) or `sglang-router` (0.3.2, January 2026: name it
    #: to keep it). A running 0.3.2 router of an inventory that names no package is migrated to smg by `deploy up`
    #: through the gated path (router/migrate.py), and `deploy plan` says so first.
    package: RouterPackage = "smg"
    #: Default: the package's pinned release (ROUTER_DEFAULT_VERSION).
    version: str = ""
    #: Default: /opt/smg, or /opt/sglang-router for sglang-router (a venv per package: a switch never mixes the two).
    venv: str = ""
    #: Where pip finds sglang-router when the venv lacks it (`pip install --index-url`); default pip's own.
    pip_index_url: str | None = None
    #: Where clients and deploy reach the router; default http://<its container's address>:<port>.
    url: str | None = None
    host: str = "127.0.0.1"
    port: int = Field(30000, ge=1, le=65535)
    policy: RouterPolicy = "cache_aware"
    workers: str | None = None
    worker_urls: dict[str, str] = Field(default_factory=dict)
    flags: dict[str, FlagValue] = Field(default_factory=dict)
    # Clients and workers: default the workers' profile api_key (one key for the fleet), kept in a 0600 file.
    api_key: SecretRef | None = None

    @model_validator(mode="after")
    def _defaults(self) -> RouterSpec:
        """A router in a container is reached over the site network: bind every address unless told; the
        version and venv follow the package unless set."""
        if "host" not in self.model_fields_set and self.runs_on != "operator":
            object.__setattr__(self, "host", "0.0.0.0")
        if not self.version:
            object.__setattr__(self, "version", ROUTER_DEFAULT_VERSION[self.package])
        if not self.venv:
            object.__setattr__(self, "venv", f"/opt/{self.package}")
        return self

    @field_validator("flags")
    @classmethod
    def _flag_names(cls, v: dict[str, FlagValue]) -> dict[str, FlagValue]:
        for key in v:
            if not re.fullmatch(r"[a-z0-9][a-z0-9-]*", key):
                raise ValueError(f"router flag {key!r}: write long names without leading dashes, e.g. "
                                 "health-check-interval-secs")
            if key in ROUTER_OWNED_FLAGS:
                raise ValueError(f"router flag {key!r} comes from the router section's own field; remove it")
        return v

    @field_validator("url", "pip_index_url")
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        if v is not None and not re.fullmatch(r"(https?|file)://\S+", v):
            raise ValueError(f"{v!r} must be a URL (http://…, https://… or file://…)")
        return v.rstrip("/") if v is not None else None

    @field_validator("worker_urls")
    @classmethod
    def _urls(cls, v: dict[str, str]) -> dict[str, str]:
        for host, url in v.items():
            if not re.fullmatch(r"https?://[A-Za-z0-9.\[\]:-]+(:\d+)?/?", url):
                raise ValueError(f"worker_urls.{host}: {url!r} must look like http://ADDRESS:PORT")
        return v
#: Words of the target grammar (`host A B`, `group G`); no host or group may be called that.
TARGET_KEYWORDS = ("host", "group")


def _expand_groups(groups: dict[str, list[str]], hosts: dict[str, Host]) -> dict[str, list[str]]:
    """Every group's hosts in order of first appearance, nested groups expanded; problems raise ValueError.

    A member names a host or another group. A name that is both is ambiguous; a group reaching itself is a cycle;
    the same member listed twice in one group is a typo. Overlaps through nesting are fine (each host once).
    A member that names neither is kept as a host name here: the group is refused when a command targets it
    (`Inventory.group_hosts`), not when the inventory loads, so that a groups file naming hosts that are gone
    (the simulator's, after `deploy sim down`) does not break every other command.
    """
    problems: list[str] = []
    for name, members in groups.items():
        if name in hosts:
            problems.append(f"groups.{name}: the name is also a host's; rename the group")
        if name in TARGET_KEYWORDS:
            problems.append(f"groups.{name}: '{name}' is a command keyword; rename the group")
        seen: set[str] = set()
        for member in members:
            if member in seen:
                problems.append(f"groups.{name}: {member!r} is listed twice")
            seen.add(member)
    if problems:
        raise ValueError("; ".join(problems))
    expanded: dict[str, list[str]] = {}

    def expand(name: str, path: tuple[str, ...]) -> list[str]:
        if name in path:
            raise ValueError(f"groups.{path[0]}: cycle {' → '.join((*path, name))}")
        if name in expanded:
            return expanded[name]
        out: list[str] = []
        for member in groups[name]:
            for host in expand(member, (*path, name)) if member in groups else [member]:
                if host not in out:
                    out.append(host)
        expanded[name] = out
        return out

    for name in groups:
        expand(name, ())
    return expanded


def url_problem(url: str) -> str | None:
    """Why deploy cannot post to `url` (None: it can): not http(s)://host[/path], or a port out of range (the
    notifier raised `Port out of range` at every post of a watch before issue 50)."""
    if not re.fullmatch(r"https?://[^\s/]+(/\S*)?", url):
        return "not an http:// or https:// URL"
    parts = urlsplit(url)
    try:
        _ = parts.port
    except ValueError as exc:
        return str(exc)
    return None if parts.hostname else "no host name"


class WebhookSpec(StrictModel):
    """Where run events (rollbacks, a watchdog that gave up) are posted: monitoring/notify.py."""

    #: The receiver's URL: plain (`http://alerts.example:9093/api/v2/…`), or a secret ref when it holds a token.
    url: str | SecretRef
    format: Literal["alertmanager", "json"] = "alertmanager"
    retries: int = Field(default=3, ge=0, le=10)
    timeout_s: float = Field(default=5.0, gt=0, le=60)

    @field_validator("url")
    @classmethod
    def _http(cls, v: str | SecretRef) -> str | SecretRef:
        if isinstance(v, str) and (problem := url_problem(v)) is not None:
            raise ValueError(f"{v!r}: {problem}")
        return v

    def read_url(self) -> str:
        url = self.url.read() if isinstance(self.url, SecretRef) else self.url
        if (problem := url_problem(url.strip())) is not None:
            raise ConfigError(f"notify.webhook.url: the secret holds no URL deploy can post to ({problem})",
                              fix="put the receiver's whole URL (http:// or https://, a port up to 65535) in the "
                                  "file (or variable) it names")
        return url.strip()


class NotifySpec(StrictModel):
    webhook: WebhookSpec


class HealthPolicy(StrictModel):
    """The operator's action policy for GPU hardware faults: what `deploy watch` does by itself for each catalog
    action (orchestrator/hardware/policy.py, docs/hardware.md). Why a reboot is off by default: a reboot stops every
    request on the host and a wrong one costs minutes of capacity, so the operator opts in."""

    #: restart_unit (an Xid confined to the process): drain, restart sglang, verify, return.
    restart: bool = True
    #: reboot_host: drain, reboot the node (`systemctl reboot`), verify, return; never while another host of the
    #: fleet is out of the router.
    reboot: bool = False
    #: isolate_gpu (a failed row remap): drain and keep the host out until the GPU is swapped; false: only reported.
    isolate: bool = True
    #: How long a rebooted node may take to answer SSH again with a new boot and its container running.
    reboot_timeout_s: float = Field(default=600.0, gt=0, le=3600)


class Inventory(StrictModel):
    hosts: dict[HostName, Host] = Field(default_factory=dict)
    profiles: dict[str, ServerProfile] = Field(default_factory=dict)
    presets: dict[str, BenchPreset] = Field(default_factory=dict)
    # Named sets of hosts for fleet commands (`deploy up group prod`); members are host or group names.
    groups: dict[str, list[HostName]] = Field(default_factory=dict)
    router: RouterSpec | None = None
    notify: NotifySpec | None = None
    health: HealthPolicy = Field(default_factory=HealthPolicy)
    #: The team's state store (docs/team.md): a PostgreSQL URL without a password (DEPLOY_STATE_URL wins), and the
    #: 0600 file holding its password.
    state_url: str | None = None
    state_password_file: str | None = None

    @model_validator(mode="after")
    def _references_resolve(self) -> Inventory:
        for name in self.profiles:
            if not PROFILE_NAME.fullmatch(name):
                raise ValueError(f"profiles.{name!r}: a profile name is letters, digits and . _ - (not first), at "
                                 "most 64: it names the file locks/<name>.txt that `deploy lock` writes")
        for name in self.hosts:
            if name in TARGET_KEYWORDS:
                raise ValueError(f"hosts.{name}: '{name}' is a command keyword; rename the host")
        _expand_groups(self.groups, self.hosts)
        if self.router is not None:
            r = self.router
            if r.runs_on != "operator" and r.runs_on not in self.hosts:
                raise ValueError(f"router.runs_on: unknown host {r.runs_on!r} (give 'operator' or a host name)")
            if r.runs_on == "operator" and r.vmid is not None:
                raise ValueError("router.vmid: only with runs_on: HOST (the router's container on that host)")
            if r.workers is not None and r.workers not in self.groups:
                raise ValueError(f"router.workers: unknown group {r.workers!r} "
                                 f"(known: {', '.join(sorted(self.groups)) or 'none'})")
            for url_host in r.worker_urls:
                if url_host not in self.hosts:
                    raise ValueError(f"router.worker_urls: unknown host {url_host!r}")
        for name, host in self.hosts.items():
            if host.profile not in self.profiles:
                raise ValueError(f"hosts.{name}.profile: unknown profile {host.profile!r} "
                                 f"(known: {', '.join(sorted(self.profiles)) or 'none'})")
            target = self.profiles[host.profile].model_path
            problem = mount_path_problem(target) if host.container.model_mount is not None else None
            if problem:
                raise ValueError(f"hosts.{name}.container.model_mount: the profile's model_path {target!r} is where "
                                 f"it is mounted in the container, and {problem}")
        for name, prof in self.profiles.items():
            if prof.bench_preset not in self.presets:
                raise ValueError(f"profiles.{name}.bench_preset: unknown preset {prof.bench_preset!r} "
                                 f"(known: {', '.join(sorted(self.presets)) or 'none'})")
        return self

    def find_host(self, name_or_address: str) -> Host:
        """A host is named by its inventory name or its address."""
        if name_or_address in self.hosts:
            return self.hosts[name_or_address]
        matches = [h for h in self.hosts.values() if h.address == name_or_address]
        if len(matches) == 1:
            return matches[0]
        if len(matches) > 1:
            raise ConfigError(f"address {name_or_address} belongs to several hosts: "
                              f"{', '.join(h.name for h in matches)}", fix="name the host instead")
        known = ", ".join(f"{h.name} ({h.address})" for h in self.hosts.values()) or "none"
        guess = did_you_mean(name_or_address, [*self.hosts, *(h.address for h in self.hosts.values())])
        raise ConfigError(f"no host {name_or_address!r} in the inventory (known: {known})",
                          fix=(f"did you mean {guess!r}? " if guess else "")
                          + "add it to the inventory, or check --inventory / $DEPLOY_INVENTORY",
                          details={"suggestion": guess})

    def group_hosts(self, name: str) -> list[Host]:
        """The hosts of a group, nested groups expanded, each host once, in inventory order of first mention."""
        if name not in self.groups:
            raise unknown_name("group", name, self.groups, where=" in the inventory",
                               fix="add it under 'groups:' in an inventory file, or check --inventory")
        members = _expand_groups(self.groups, self.hosts)[name]
        unknown = [m for m in members if m not in self.hosts]
        if unknown:
            guesses = {m: did_you_mean(m, list(self.hosts)) for m in unknown}
            raise ConfigError(
                f"group {name!r} names host(s) the inventory does not have: "
                + ", ".join(f"{m!r}" + (f" (did you mean {guesses[m]!r}?)" if guesses[m] else "") for m in unknown)
                + f" (known hosts: {', '.join(sorted(self.hosts)) or 'none'})",
                fix=f"add them to the inventory, or remove them from groups.{name} (simulated hosts leave the "
                    "inventory with `deploy sim down`); nothing was contacted")
        return [self.hosts[h] for h in members]

    def profile_for(self, host: Host) -> ServerProfile:
        return self.profiles[host.profile]

    def profile(self, name: str) -> ServerProfile:
        if name not in self.profiles:
            raise unknown_name("profile", name, self.profiles,
                               fix="pick one of the known profiles or add it under 'profiles:'")
        return self.profiles[name]

    def preset(self, name: str) -> BenchPreset:
        if name not in self.presets:
            raise unknown_name("bench preset", name, self.presets,
                               fix="pick one of the known presets or add it under 'presets:'")
        return self.presets[name]
