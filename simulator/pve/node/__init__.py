"""A simulated node's container logic by concern; simulator/pve/lxc.py's `Node` joins them."""
