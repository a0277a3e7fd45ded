"""Reading and changing a CT's config (GET/PUT config, `pct set`): pending values, digests, device checks.
"""

from __future__ import annotations

import re
import stat
from typing import Any

from simulator import ctconf as confmod
from simulator.pve.errors import PveError
from simulator.pve.node.perms import NodePerms
from simulator.pve.schema import ParamError


class NodeConfig(NodePerms):
    """GET and PUT of a CT's config."""

    def config_get(self, vmid: int, current: bool = False) -> dict[str, Any]:
        """GET config: pending values by default, like PVE (`current=1`: the values the container runs with)."""
        from simulator.pve import pending

        conf, digest = self.read(vmid)
        conf = conf if current else pending.with_pending(conf)
        data: dict[str, Any] = dict(conf.options)
        if conf.description:
            data["description"] = conf.description
        data["digest"] = digest
        if conf.lxc:
            data["lxc"] = [[k, v] for k, v in conf.lxc]
        return data

    def config_set(self, vmid: int, values: dict[str, str], delete: list[str], digest: str | None,
                   user: str) -> None:
        for opt in delete:
            if opt in values:
                raise ParamError({"delete": f"you can't use '-{opt}' and -delete {opt}' at the same time"})
        with self.lock(vmid):
            conf, current = self.read(vmid)
            self.check_lock(conf)  # update_vm: before the digest and every other check
            if digest and digest != current:
                raise PveError("detected modified configuration - file changed by other user? Try again.")
            unpriv = conf.options.get("unprivileged") == "1"
            self.check_modify_perm(user, vmid, [*values, *delete], values, unpriv, conf.options)
            values = {k: self._fill_net(v) if re.fullmatch(r"net\d+", k) else v for k, v in values.items()}
            self.check_devices(values)
            from simulator.pve import pending

            pending.update(conf, values, delete, running=self.running(vmid))
            self.write(vmid, conf)

    def check_devices(self, values: dict[str, Any]) -> None:
        """update_pct_config stats every devN path on the host when it is set (Tools::get_device_mode_and_rdev)."""
        for key, spec in values.items():
            if re.fullmatch(r"dev\d+", key):
                path = confmod.split_property(str(spec), "path").get("path", "")
                try:
                    mode = self._host_dev(path).stat().st_mode
                except FileNotFoundError:
                    raise PveError(f"Device {path} does not exist") from None
                if not stat.S_ISCHR(mode) and not stat.S_ISBLK(mode):
                    raise PveError(f"{path} is not a device")
