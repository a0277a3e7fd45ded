"""A tiny app on the stand-in's HTTP server (sglang/_sim/http_server.py) for test_http.py.

Run as `python http_app.py` with PYTHONPATH at the stand-in tree: it binds 127.0.0.1 on a free port, prints the
port on its first line and serves until SIGTERM. Routes: GET /hello, POST /echo (what the server read), POST
/stream?n=N&delay=S (N SSE events), GET /stats (streams finished and aborted by a client that went away), GET /boom
(a handler that fails).
"""

from __future__ import annotations

import asyncio
import signal
import sys
from typing import Any

from sglang._sim.http_server import App, Request, Response, Stream, json_response, text_response

stats = {"finished": 0, "aborted": 0}


async def hello(request: Request) -> Response:
    return text_response("hello")


async def echo(request: Request) -> Response:
    data: dict[str, Any] = {"method": request.method, "path": request.path, "query": request.query,
                            "version": request.version, "length": len(request.body),
                            "body": request.body.decode("latin-1"),
                            "transfer_encoding": request.header("Transfer-Encoding"),
                            "authorization": request.header("Authorization")}
    return json_response(data)


async def stream(request: Request) -> Stream:
    params = dict(p.split("=", 1) for p in request.query.split("&") if "=" in p)
    n, delay = int(params.get("n", "3")), float(params.get("delay", "0"))
    resp = await request.stream({"Content-Type": "text/event-stream", "Cache-Control": "no-cache"})
    try:
        for i in range(n):
            await resp.write(f"data: {i}\n\n".encode())
            await asyncio.sleep(delay)
        await resp.write(b"data: [DONE]\n\n")
    except (ConnectionResetError, asyncio.CancelledError):
        stats["aborted"] += 1
        raise
    stats["finished"] += 1
    return resp


async def get_stats(request: Request) -> Response:
    return json_response(stats)


async def boom(request: Request) -> Response:
    raise RuntimeError("boom")


async def main() -> None:
    app = App()
    app.route("GET", "/hello", hello)
    app.route("POST", "/echo", echo)
    app.route("PUT", "/echo", echo)
    app.route("POST", "/stream", stream)
    app.route("GET", "/stats", get_stats)
    app.route("GET", "/boom", boom)
    await app.start("127.0.0.1", 0)
    print(app.port, flush=True)
    stop = asyncio.Event()
    asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
    await stop.wait()
    await app.close()


if __name__ == "__main__":
    asyncio.run(main())
    sys.exit(0)
