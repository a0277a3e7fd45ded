"""The Xid catalog shipped in the package (xid.yaml): code -> meaning -> action, each rule with its source.

Why a data file: the rules are facts from NVIDIA's catalog and field reports, reviewed like data, and the later
cordon/remedy loop reads the same `Action` values that doctor prints.
"""

from __future__ import annotations

import functools
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, ValidationError

from orchestrator.errors import ConfigError
from orchestrator.local.yamlfile import parse_yaml
from orchestrator.resources import xid_catalog_file


class Action(StrEnum):
    """What a fault asks for, mildest first (the ladder a remedy climbs)."""

    none = "none"
    restart_unit = "restart_unit"
    reboot_host = "reboot_host"
    isolate_gpu = "isolate_gpu"

    @property
    def rank(self) -> int:
        return list(Action).index(self)

    @property
    def fatal(self) -> bool:
        """The host cannot serve until this is done: doctor and status exit non-zero."""
        return self in (Action.reboot_host, Action.isolate_gpu)


#: The operator's instruction for each action ({host} and {gpu} filled in by the caller).
ACTION_FIX = {
    Action.none: "nothing to do: reported only, {host} keeps serving (NVIDIA's catalog asks for no action); if it "
                 "repeats, look the code up in docs/hardware.md",
    Action.restart_unit: "restart the server: `deploy up host {host}` (or `systemctl restart sglang` in the CT); "
                         "if the Xid repeats, drain the host and reboot it",
    Action.reboot_host: "drain the host (`deploy router remove {host}` when it serves behind the router), reboot the "
                        "node, then `deploy up host {host}` to verify and `deploy router add {host}` to return it",
    Action.isolate_gpu: "take the host out of service (`deploy router remove {host}`): GPU {gpu} needs replacing "
                        "(open a hardware ticket with the evidence line); return the host only after the swap",
}


#: The driver's GPU recovery action (NVML nvmlGpuRecoveryAction_t, R565+) -> what deploy does: by the code of Xid 154's
#: `changed from 0x0 (None) to 0x2 (Node Reboot Required)` and by what `nvidia-smi -q` prints as GPU Recovery Action.
#: Reset and Drain-and-Reset are a node reboot here (deploy resets the GPUs of a TP8 server by rebooting the node);
#: Drain P2P asks that the processes doing peer-to-peer traffic stop (the server), after which the driver names the
#: next action.
RECOVERY_BY_CODE = {0: Action.none, 1: Action.reboot_host, 2: Action.reboot_host, 3: Action.restart_unit,
                    4: Action.reboot_host}
RECOVERY_BY_SMI = {"None": Action.none, "Reset": Action.reboot_host, "Reboot": Action.reboot_host,
                   "Drain P2P": Action.restart_unit, "Drain and Reset": Action.reboot_host,
                   # some drivers print NVML's own names (seen: `GPU Recovery Action : GPU_RESET`)
                   "NONE": Action.none, "GPU_RESET": Action.reboot_host, "NODE_REBOOT": Action.reboot_host,
                   "DRAIN_P2P": Action.restart_unit, "DRAIN_AND_RESET": Action.reboot_host}
RECOVERY_SOURCE = ("NVIDIA Xid catalog (Xid 154: follow the driver's recovery action); NVIDIA GPU memory error "
                   "management, recovery action flag (NVML_GPU_RECOVERY_ACTION_*)")


def recovery_action(smi_value: str) -> Action:
    """deploy's action for `nvidia-smi -q`'s GPU Recovery Action; a value this table does not know is a reboot (the
    driver asked for something deploy cannot name)."""
    return RECOVERY_BY_SMI.get(smi_value.strip(), Action.reboot_host)


class XidRule(BaseModel):
    """One catalog entry."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    code: int
    mnemonic: str
    meaning: str
    nvidia: str
    action: Action
    source: str


class XidCatalog(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")

    catalog: str
    rules: tuple[XidRule, ...]

    def rule(self, code: int) -> XidRule:
        """The rule for `code`; an unknown code is a rule of its own (investigate, not fatal)."""
        for r in self.rules:
            if r.code == code:
                return r
        return XidRule(code=code, mnemonic="UNKNOWN", meaning=f"Xid {code} (not in deploy's catalog)",
                       nvidia="see the catalog", action=Action.restart_unit,
                       source=f"{self.catalog} (look the code up)")


def parse_catalog(text: str, where: str = "xid.yaml") -> XidCatalog:
    """The catalog from its YAML text; a broken file is a ConfigError naming it."""
    data = parse_yaml(text, f"the Xid catalog {where}")  # libyaml, keys once: every run reads the catalog
    try:
        cat = XidCatalog.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(f"the Xid catalog {where} is invalid: {exc}",
                          fix="reinstall deploy (the catalog ships in the package)") from exc
    codes = [r.code for r in cat.rules]
    if len(codes) != len(set(codes)):
        raise ConfigError(f"the Xid catalog {where} lists a code twice", fix="keep one rule per Xid code")
    return cat


@functools.cache
def load_catalog() -> XidCatalog:
    """The shipped catalog (read once)."""
    path = xid_catalog_file()
    return parse_catalog(path.read_text(), str(path))
