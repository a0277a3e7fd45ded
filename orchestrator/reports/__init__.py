"""Reports over bench runs and sweeps: tables, PNG plots, self-contained HTML."""
