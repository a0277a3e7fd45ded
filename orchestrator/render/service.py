"""sglang.service and sglang.env for a server profile and a canonical flag set."""

from __future__ import annotations

import re
from typing import Any

from orchestrator.errors import ConfigError
from orchestrator.flags import FlagSchema, FlagSet, canonicalize, secret_names, stored_flags
from orchestrator.inventory.models import ServerProfile
from orchestrator.layout import PATHS
from orchestrator.redact import REDACTED, SECRET_REF
from orchestrator.render.files import (
    RenderedFile,
    check_env_name,
    render_template,
    sha256_text,
    split_header,
    systemd_exec_arg,
)
from orchestrator.stacks.kernel_caches import cache_env

UNIT_PATH = PATHS.unit_path  # orchestrator.layout owns the layout
ENV_PATH = PATHS.env_path
#: Server options that must stay out of argv (the API key): sglang reads them with `--config FILE`.
SECRETS_PATH = PATHS.secrets_path
#: sglang's logging config (SGLANG_LOGGING_CONFIG_PATH) for servers with an API key; see render_logging.
LOGGING_PATH = PATHS.logging_path
#: Loggers that print the API key in clear at INFO: `server_args=ServerArgs(… api_key='…')` (0.5.12.post1,
#: sglang/srt/entrypoints/engine.py) and `server_args={… 'api_key': '…'}` (0.5.23, same module).
KEY_LOGGING_LOGGERS = ("sglang.srt.entrypoints.engine",)
API_KEY_VAR = "SGLANG_API_KEY"
SECRET_FLAG_VAR = "DEPLOY_SECRET_FLAG_"
RESTART_SEC = 10
START_LIMIT_BURST = 3


def _launch_groups(profile: ServerProfile, flags: FlagSet) -> list[list[str]]:
    schema = flags.schema
    owned = [("model-path", profile.model_path), ("served-model-name", profile.served_model_name),
             ("host", profile.host), ("port", str(profile.port))]
    groups: list[list[str]] = []
    for name, value in owned:
        if schema.by_option("--" + name) is None:
            raise ConfigError(f"sglang {schema.version} has no --{name}; the unit cannot pass the profile's {name}",
                              fix="check the sglang version of the profile")
        groups.append(["--" + name, value])
    return groups


def secret_flags(profile: ServerProfile, flags: FlagSet) -> frozenset[str]:
    """The one rule for secret server flags: the schema or the profile (`secret_flags`) marks them. Like the API
    key they go into secrets.yaml (0600, read by sglang with `--config`), never into argv or the unit."""
    return secret_names(flags, profile.secret_flags)


def public_flags(profile: ServerProfile, flags: FlagSet) -> dict[str, Any]:
    """The flags as evidence, output and the ledger carry them: a secret's value replaced by its reference."""
    return stored_flags(flags, secret_flags(profile, flags))


def has_secrets(profile: ServerProfile, flags: FlagSet) -> bool:
    """The server reads secrets.yaml (and keeps its argument dump out of the journal): an API key or secret flags."""
    return profile.api_key is not None or bool(secret_flags(profile, flags))


def server_python(profile: ServerProfile, venv: str | None = None) -> str:
    """The interpreter the unit runs: the release's stack venv (`venv`), else the profile's own venv."""
    where = venv or profile.venv
    if not re.fullmatch(r"/[A-Za-z0-9_./-]+", where) or "/../" in where + "/":
        raise ConfigError(f"venv {where!r} must be an absolute path of letters, digits, '_', '.', '-'",
                          fix="e.g. venv: /root/ml-env")
    return where.rstrip("/") + "/bin/python"


def exec_start(profile: ServerProfile, flags: FlagSet, venv: str | None = None) -> str:
    """ExecStart's value: interpreter, module, then one flag per continuation line (systemd-quoted)."""
    python = server_python(profile, venv)
    lines = [f"{python} -m sglang.launch_server"]
    for group in _launch_groups(profile, flags):
        lines.append(" ".join(systemd_exec_arg(w) for w in group))
    secret = secret_flags(profile, flags)
    if profile.api_key is not None or secret:
        # The secrets are in a 0600 YAML file that sglang reads itself: neither the unit nor argv (ps) holds them.
        # Two words, never `--config=FILE`: sglang only merges the file when argv has the bare `--config` token.
        lines.append("--config " + systemd_exec_arg(SECRETS_PATH))
    for group in flags.argv_groups(without=secret):
        lines.append(" ".join(systemd_exec_arg(w) for w in group))
    return " \\\n    ".join(lines)


def launch_argv(profile: ServerProfile, flags: FlagSet, api_key: str | None = None,
                venv: str | None = None, *, withheld: bool = False) -> list[str]:
    """The argv sglang receives from systemd: `--config SECRETS_PATH` when there are secrets (has_secrets, or
    `withheld`: secret flags left out of `flags` because only their references are known).

    With `api_key` (a placeholder, for validating a flag set with the container's parser before anything is
    installed) the key and every secret flag are passed as `--NAME PLACEHOLDER` instead, so the check needs no
    file on the target and no secret reaches its argv.
    """
    argv = [server_python(profile, venv), "-m", "sglang.launch_server"]
    for group in _launch_groups(profile, flags):
        argv.extend(group)
    secret = secret_flags(profile, flags)
    if api_key is None:
        if profile.api_key is not None or secret or withheld:
            argv.extend(["--config", SECRETS_PATH])
    else:
        if profile.api_key is not None:
            argv.extend(["--api-key", api_key])
        flags = FlagSet(schema=flags.schema, values={**flags.values, **{n: api_key for n in secret}})
    argv.extend(flags.argv(without=secret if api_key is None else ()))
    return argv


def stored_launch_argv(profile: ServerProfile, stored: dict[str, Any], schema: FlagSchema,
                       venv: str | None = None) -> list[str]:
    """The argv a release's stored flags (flags.json) start sglang with. A secret is stored as its reference
    (SECRET_REF), which is no value to parse; it is never in argv either (sglang reads it from secrets.yaml through
    `--config`), so it is left out and only says that `--config` is there."""
    withheld = {name for name, value in stored.items() if value in (SECRET_REF, REDACTED)}
    flags = canonicalize({k: v for k, v in stored.items() if k not in withheld}, schema)
    return launch_argv(profile, flags, venv=venv, withheld=bool(withheld))


def unit_cuda_home(profile: ServerProfile, cuda_home: str | None, venv: str | None = None) -> str | None:
    """The unit's CUDA_HOME: the CUDA the release's stack carries (`cuda_home`, inside its venv), unless the
    profile's env: names one itself (that one wins, as the EnvironmentFile would anyway) or there is none. A path
    outside the venv or with a character systemd would read is no stack's: left out (doctor then says nvcc is
    missing)."""
    if not cuda_home or "CUDA_HOME" in profile.env:
        return None
    inside = server_python(profile, venv).removesuffix("/bin/python") + "/lib/python3"
    safe = re.fullmatch(r"/[A-Za-z0-9_./-]+", cuda_home) and "/../" not in cuda_home + "/"
    return cuda_home.rstrip("/") if safe and cuda_home.startswith(inside) else None


def render_unit(profile: ServerProfile, flags: FlagSet, release_id: str | None = None,
                venv: str | None = None, cuda_home: str | None = None) -> RenderedFile:
    """sglang.service, running `venv`'s sglang (the release's stack; default the profile's venv), with CUDA_HOME the
    CUDA that stack carries (`cuda_home`: unit_cuda_home). The managed header (release id, body hash) is excluded
    from `sha256`."""
    ctx: dict[str, object] = {
        "cuda_home": unit_cuda_home(profile, cuda_home, venv) or "",
        "served_model_name": profile.served_model_name,
        "model_path": profile.model_path,
        "env_file": ENV_PATH,
        "logging_config": LOGGING_PATH if has_secrets(profile, flags) else "",
        "exec_start": exec_start(profile, flags, venv),
        "restart_sec": RESTART_SEC,
        "start_limit_burst": START_LIMIT_BURST,
        "start_limit_interval_s": START_LIMIT_BURST * (profile.start_timeout_s + RESTART_SEC),
        "timeout_start_s": profile.start_timeout_s,
        "timeout_stop_s": profile.stop_timeout_s,
    }
    for field in ("served_model_name", "model_path"):
        text = str(ctx[field])
        if "\n" in text or "\r" in text:
            raise ConfigError(f"profile {field} {text!r} contains a newline", fix="use a single-line value")
        ctx[field] = text.replace("%", "%%").rstrip("\\")  # Description= resolves specifiers
    body = render_template("sglang.service.j2", header=False, release_id="", body_sha256="", **ctx)
    digest = sha256_text(body)
    content = render_template("sglang.service.j2", header=True, release_id=release_id or "unreleased",
                              body_sha256=digest, **ctx)
    assert split_header(content)[1] == body
    return RenderedFile(name="sglang.service", remote_path=UNIT_PATH, mode=0o644, content=content, sha256=digest)


def render_env(profile: ServerProfile, api_key: str | None, flags: FlagSet | None = None,
               cache_dir: str | None = None) -> RenderedFile:
    """sglang.env: the profile's env (sorted) plus SGLANG_API_KEY when the profile has an api_key, plus each
    secret flag as DEPLOY_SECRET_FLAG_<NAME> (as the key: `up` sees a changed secret in this file's hash; the
    server reads its value from secrets.yaml). With `cache_dir` (the release's kernel cache, orchestrator/caches.py)
    the cache variables point every kernel and JIT cache there; a variable the profile sets itself wins."""
    env = [(check_env_name(k), v) for k, v in sorted(profile.env.items())]
    if cache_dir:
        env += [(k, v) for k, v in cache_env(cache_dir) if k not in profile.env]
    secret = sorted(secret_flags(profile, flags)) if flags is not None else []
    env += [(SECRET_FLAG_VAR + n.upper().replace("-", "_"), str(flags.values[n])) for n in secret if flags]
    if API_KEY_VAR in profile.env:
        raise ConfigError(f"profile env sets {API_KEY_VAR}; the API key comes from profile.api_key",
                          fix=f"remove {API_KEY_VAR} from env and set api_key: {{env: ...}} or {{file: ...}}")
    if profile.api_key is not None and not api_key:
        raise ConfigError(f"profile has an api_key ({profile.api_key.describe()}) but no key value was given",
                          fix=f"provide the secret ({profile.api_key.describe()})")
    if profile.api_key is None and api_key:
        raise ConfigError("an API key was given but the profile has no api_key", fix="add api_key to the profile")
    content = render_template("sglang.env.j2", remote_path=ENV_PATH, env=env,
                              api_key_var=API_KEY_VAR if profile.api_key is not None else "",
                              api_key=api_key or "")
    return RenderedFile(name="sglang.env", remote_path=ENV_PATH, mode=0o600, content=content,
                        sha256=sha256_text(content),
                        secrets=((api_key,) if api_key else ()) + tuple(str(flags.values[n]) for n in secret if flags))


def render_secrets(profile: ServerProfile, api_key: str | None, flags: FlagSet | None = None) -> RenderedFile | None:
    """secrets.yaml (0600): the options sglang reads with `--config`: `api-key` and the secret flags of `flags`
    (secret_flags). None without any.

    sglang (0.5.12.post1 and 0.5.23 alike) turns each key into `--KEY VALUE` ahead of the command line's own
    arguments, so argparse lets the unit's flags win; the key is spelled as the long flag (`api-key`), which
    both versions pass through verbatim.
    """
    options: list[tuple[str, str]] = []
    if profile.api_key is not None:
        if not api_key:
            raise ConfigError(f"profile has an api_key ({profile.api_key.describe()}) but no key value was given",
                              fix=f"provide the secret ({profile.api_key.describe()})")
        options.append(("api-key", api_key))
    if flags is not None:
        options.extend((name, str(flags.values[name])) for name in sorted(secret_flags(profile, flags)))
    if not options:
        return None
    content = render_template("sglang-secrets.yaml.j2", remote_path=SECRETS_PATH, options=options)
    return RenderedFile(name="secrets.yaml", remote_path=SECRETS_PATH, mode=0o600, content=content,
                        sha256=sha256_text(content), secrets=tuple(v for _, v in options))


def render_logging(profile: ServerProfile, flags: FlagSet) -> RenderedFile | None:
    """logging.json (0644, no secret) for a server with secrets (has_secrets), else None.

    Both pinned sglang releases log their full arguments, the key included, at start (INFO). With
    SGLANG_LOGGING_CONFIG_PATH set, sglang's configure_logger applies this dictConfig instead of its default:
    the same line format (without the TP rank), the level of the profile's `log-level` flag (default info),
    and the logger that prints the arguments held at WARNING.
    """
    if not has_secrets(profile, flags):
        return None
    level = str(flags.as_dict().get("log-level") or "info").upper()
    content = render_template("sglang-logging.json.j2", level=level, quiet=KEY_LOGGING_LOGGERS)
    return RenderedFile(name="logging.json", remote_path=LOGGING_PATH, mode=0o644, content=content,
                        sha256=sha256_text(content))
