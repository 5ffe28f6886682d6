"""Mount the pglogq dashboard inside your own ASGI application (Starlette here; FastAPI's
``app.mount`` is the same call).

Run it:  python examples/dashboard_mount.py --serve   then open http://127.0.0.1:8000/ops/pglogq/
Without --serve it starts the app on a free port, reads the dashboard through it and stops (the
test suite runs it that way).  Needs the dashboard extra: pip install -e '.[dashboard]'
in the checkout (once pglogq is published: pip install 'pglogq[dashboard]').
"""

from __future__ import annotations

import os
import sys
import threading
import time
import urllib.request

import uvicorn
from starlette.applications import Starlette
from starlette.responses import PlainTextResponse
from starlette.routing import Mount, Route

import pglogq
from pglogq.dashboard import create_app

DSN = os.environ.get("PGLOGQ_DSN")


async def home(request: object) -> PlainTextResponse:
    return PlainTextResponse("my application; the queues are at /ops/pglogq/\n")


# your client (or a DSN: create_app(DSN) makes and closes its own)
client = pglogq.AsyncClient(DSN)
dashboard = create_app(client, refresh=5)  # read-only; actions=True needs token=...

app = Starlette(routes=[
    Route("/", home),
    Mount("/ops/pglogq", app=dashboard),
])


def main() -> None:
    with pglogq.Client(DSN) as c:  # something to show
        c.create_queue("example_orders")
        c.subscribe("example_orders", "billing")
        c.send("example_orders", {"order": 1})
        c.tick("example_orders", force=True)
    if "--serve" in sys.argv:
        uvicorn.run(app, host="127.0.0.1", port=8000)
        return
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    port = server.servers[0].sockets[0].getsockname()[1]
    for path in ("/ops/pglogq/", "/ops/pglogq/queues/example_orders"):
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}") as resp:
            body = resp.read().decode()
            print(f"dashboard mounted at {path}: {resp.status}")
            assert "example_orders" in body
            assert f"http://127.0.0.1:{port}/ops/pglogq/static/htmx.min.js" in body  # links stay under the mount
    server.should_exit = True
    thread.join()


if __name__ == "__main__":
    main()

# test-expects: dashboard mounted at /ops/pglogq/: 200
# test-expects: dashboard mounted at /ops/pglogq/queues/example_orders: 200
