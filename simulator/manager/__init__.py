"""Bringing simulated hosts up and down (lifecycle), their fault knobs (faults) and
`python -m simulator.manager` (cli, run by __main__)."""
