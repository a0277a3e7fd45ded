"""The one implementation of container lifecycle and config on a simulated node.

Both the HTTPS API server and the host's `pct`/`pvesh` call these functions, so every view of a container
(conf file, API, CLI, `pct exec`) always agrees. Error texts are PVE's. Operations that PVE runs as worker tasks
take a `log` callable and raise `TaskError`; synchronous pre-checks raise `PveError` (HTTP 500 unless stated).
"""

from __future__ import annotations

from simulator.pve.acl import ROOT_USER as ROOT_USER
from simulator.pve.errors import PveError as PveError
from simulator.pve.node.base import LOCKS as LOCKS
from simulator.pve.node.base import STD_DEV_NODES as STD_DEV_NODES
from simulator.pve.node.base import Log as Log
from simulator.pve.node.config import NodeConfig
from simulator.pve.node.create import CREATE_ONLY as CREATE_ONLY
from simulator.pve.node.create import NodeCreate
from simulator.pve.node.perms import perm_error as perm_error
from simulator.pve.node.power import LockCheck as LockCheck
from simulator.pve.node.power import NodePower
from simulator.pve.node.status import NodeStatus
from simulator.pve.tasks import TaskError as TaskError


class Node(NodeCreate, NodeConfig, NodePower, NodeStatus):
    """Container state of one simulated node (its host dir): conf files and locks (node/base.py), permissions
    (perms.py), create, config, power tasks and status, each in its own module of simulator/pve/node/."""
