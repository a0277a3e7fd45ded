"""sglang's own profiler traces turned into a step-time breakdown and a verdict with its next action.

`trace.py` reads one torch-profiler chrome trace (pure), `kernels.py` names each GPU kernel's class,
`breakdown.py` splits every decode step's time per rank, `verdict.py` judges the breakdown (the power reading is
evidence beside it), `render.py` prints it. No I/O beyond reading the trace file handed in.
"""
