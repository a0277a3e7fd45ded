"""The simulated host's containers: real LXC containers booting a stock Debian 12 template.

The PVE stand-ins (`pct`, `pvesh`, the API) keep one state (conf files, tasks, faults) and call
`simulator.lxc.runtime` for what a real node delegates to LXC: unpack the template, start/stop/reboot, attach.
See docs/simulator.md, "Containers".
"""
