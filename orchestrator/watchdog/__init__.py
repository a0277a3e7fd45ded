"""The server watchdog: its files (render.py), the program that runs in the container (probe.py), the parser of its
state (parse.py); the step that installs it is orchestrator/steps/watchdog.py."""
