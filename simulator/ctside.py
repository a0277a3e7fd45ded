"""What a real simulated LXC container sees of the simulator: the contract between the LXC runtime and the
stand-ins that run inside the container (nvidia-smi, the sglang wheel, the .run installer).

Only the GPU side is simulated, so only GPU-side state crosses into the container. The runtime bind-mounts these
at every container start (like the device nodes PVE's `devN` passes in); nothing else of the host is visible.
Kept free of imports: stand-ins inside the container read it with the container's own Python.
"""

#: Root of the simulator's mounts inside a container.
SIM_DIR = "/run/deploy-sim"
#: <root>/hosts/<name>, read-only: host.json (GPU profile, host driver version, time scale).
HOST_DIR = SIM_DIR + "/host"
#: <root>/hosts/<name>/ct/<vmid>, read-only: state.json (the container's fault knobs).
CT_DIR = SIM_DIR + "/ct"
#: <root>/hosts/<name>/gpu, read-write: load-<vmid>.json written by the model server, read by nvidia-smi.
GPU_DIR = SIM_DIR + "/gpu"
#: Plain file holding the container's VMID (so units started by the container's systemd know it too).
VMID_FILE = SIM_DIR + "/vmid"
