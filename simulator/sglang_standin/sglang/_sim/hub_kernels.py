"""What real `import sglang` does through transformers (transformers.integrations.hub_kernels): it builds the Hub
kernels' layer mapping with `kernels.LayerRepository(...)` at import time, with no revision or version. With the
`kernels` build sglang 0.5.12.post1's unpinned requirement resolves to today (0.19.1), that call raises
`ValueError: Either a revision or a version must be specified.` and `import sglang` dies; 0.5.23 pins
`kernels>=0.14.1,<0.15`. The stand-in wheel requires `kernels` as each release does (simulator/software/wheels.py);
a venv without it (the tree run from the repository) skips this, as transformers does without kernels.
"""

from __future__ import annotations

try:
    from kernels import LayerRepository  # type: ignore[import-not-found,unused-ignore]
except ImportError:
    LayerRepository = None

MAPPING = (LayerRepository(repo_id="kernels-community/activation", layer_name="SiluAndMul")
           if LayerRepository is not None else None)
