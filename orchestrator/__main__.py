"""`python -m orchestrator` = the `deploy` command."""

from orchestrator.cli import main

main()
