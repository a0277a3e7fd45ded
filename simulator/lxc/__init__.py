"""The `lxc` container runtime of the simulated host: real LXC containers booting a stock Debian 12 template.

Selected per host (`deploy sim up --runtime lxc`, host.json `runtime`). The PVE stand-ins (`pct`, `pvesh`, the
API) keep one state (conf files, tasks, faults) and call `simulator.lxc.runtime` for what a real node delegates
to LXC: unpack the template, start/stop/reboot, attach. See docs/simulator.md, "The lxc runtime".
"""
