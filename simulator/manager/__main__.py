"""`python -m simulator.manager`: the simulator's own command line."""

import sys

from simulator.manager.cli import main

sys.exit(main())
