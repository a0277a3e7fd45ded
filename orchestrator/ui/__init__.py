"""What a command shows: text or one JSON document (output.py), step progress (progress.py), tables (tables.py).

Not the command line: the CLI and the fleet (fleet/) both print through it.
"""
