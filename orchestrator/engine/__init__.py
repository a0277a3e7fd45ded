"""Runs playbooks of steps: the step registry and context, the run's typed state, the runner and its progress."""
