"""Fleets: several hosts per command. Target words → hosts (targets), a bounded worker pool (engine), the live
view and summary (view), and the glue that runs a command's per-host body over the pool (command).
"""
