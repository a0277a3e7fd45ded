"""sglang-router, the fleet's front door, in one place.

- `places.py`: from the inventory, which hosts are workers, their URLs, the router's address, key and container;
- `render.py`: its unit, launcher and key file (pure), and its packaged flag schema;
- `client.py`: its worker API over HTTP (the only code that talks to a running router);
- `drain.py`: take a worker out before its restart and back in once healthy (fleet rolls);
- `facts.py` and `converge.py`: install and converge the router `deploy up` manages (one round trip for facts).

Callers: fleet rolls (drain), `deploy up`/`plan` on a fleet (converge), `deploy bench group` (its address), and
the CLI's router view beside `deploy status group` (cli/router_view.py).
"""
