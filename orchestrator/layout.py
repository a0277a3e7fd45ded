"""The container's file layout: where the tool keeps units, releases, benches and probes inside a managed CT.

Pure (no I/O imports) so renderers and release scripts can read it without importing the remote adapters; the
container adapter (orchestrator.remote.container) re-exports it for the steps.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ContainerPaths:
    """Where the tool keeps things inside the container; the one definition every module reads."""

    state_dir: str = "/var/lib/deploy"
    unit_name: str = "sglang"
    unit_path: str = "/etc/systemd/system/sglang.service"
    env_path: str = "/etc/sglang/sglang.env"
    #: Server options that must stay out of argv (the API key): sglang reads them with `--config FILE`.
    secrets_path: str = "/etc/sglang/secrets.yaml"
    #: sglang's logging config (SGLANG_LOGGING_CONFIG_PATH) for servers with an API key.
    logging_path: str = "/etc/sglang/logging.json"
    installer_path: str = "/tmp/deploy-nvidia-userspace.run"
    #: The watchdog's systemd units (a timer firing a oneshot check; orchestrator.steps.watchdog installs them).
    watchdog_unit_path: str = "/etc/systemd/system/sglang-watchdog.service"
    watchdog_timer_path: str = "/etc/systemd/system/sglang-watchdog.timer"
    p2p_probe_path: str = "/tmp/deploy-p2p-probe.py"
    #: The hub token (hf_token) during a weights download, 0600 (HF_TOKEN_PATH); removed when the download ends.
    hf_token_path: str = "/var/lib/deploy/hf-token"
    #: Where `hf` is installed when the server's venv has none: its own venv, so the huggingface_hub it needs
    #: never replaces the one the server's transformers pins.
    hf_venv: str = "/var/lib/deploy/hf-venv"
    #: One venv per software stack (`<stack sha>/`) and its record (`<stack sha>.json`, written once the venv is
    #: complete): stacks are built beside the running server and a release names the one it runs
    #: (orchestrator/stacks.py). Outside state_dir, as software, not state.
    stacks_dir: str = "/opt/deploy/stacks"

    @property
    def releases_dir(self) -> str:
        return f"{self.state_dir}/releases"

    @property
    def current_link(self) -> str:
        """Symlink → releases/<id>: the current release."""
        return f"{self.state_dir}/current"

    @property
    def bench_dir(self) -> str:
        """Bench JSONL of runs that belong to no release."""
        return f"{self.state_dir}/bench"

    @property
    def runs_dir(self) -> str:
        """Pidfiles of running benches (`bench-<run id>.pid`): what a later run finds and stops if ours died."""
        return f"{self.state_dir}/runs"

    @property
    def watchdog_dir(self) -> str:
        """Root-only (0700): the watchdog's program, its config and its state file."""
        return f"{self.state_dir}/watchdog"

    @property
    def watchdog_script(self) -> str:
        return f"{self.watchdog_dir}/watchdog.py"

    @property
    def watchdog_config(self) -> str:
        return f"{self.watchdog_dir}/config.json"

    @property
    def watchdog_state(self) -> str:
        """Last check, state word, restarts in the budget window, last actions (JSON, 0600)."""
        return f"{self.watchdog_dir}/state.json"

    @property
    def pip_cache_dir(self) -> str:
        """pip's cache (PIP_CACHE_DIR) for every pip run of a stack, the build's and `deploy lock`'s: one managed
        cache beside the stacks, counted in and emptied first by the disk budget (not root's ~/.cache/pip, which
        nothing counted: ~4 GB of wheels per real stack). A dot directory, so no stack listing (`*.json`) sees it."""
        return f"{self.stacks_dir}/.pip-cache"

    def stack_venv(self, sha: str) -> str:
        return f"{self.stacks_dir}/{sha}"

    def stack_record(self, sha: str) -> str:
        return f"{self.stacks_dir}/{sha}.json"

    def release_dir(self, release_id: str) -> str:
        return f"{self.releases_dir}/{release_id}"

    @staticmethod
    def venv_python(venv: str) -> str:
        """The profile venv's interpreter: no activation needed under `pct exec`."""
        return f"{venv.rstrip('/')}/bin/python"


#: The layout every deploy-managed container has.
PATHS = ContainerPaths()
