"""The single-host commands as typed functions (a request in, a typed result out), beside `orchestrator/roll.py`.

Both the click command (cli/) and the fleet (cli/fleet.py, fleet/outcome.py) call them: the click command prints
the result, the fleet judges it. Nothing here prints or imports cli/ or fleet/.
"""
