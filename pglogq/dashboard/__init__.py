"""A web dashboard for pglogq: see and operate every queue from a browser.

``pglogq dashboard`` serves it; :func:`create_app` returns the ASGI app to mount in your own
(Starlette, FastAPI, any ASGI router).  It needs the ``dashboard`` extra
(``pip install -e '.[dashboard]'`` in the checkout, ``'pglogq[dashboard]'`` once published: Starlette,
uvicorn, Jinja2, python-multipart); ``import pglogq``
never imports it.  It reads and acts through :class:`pglogq.AsyncClient` only: pglogq's SQL API.
"""

from pglogq.dashboard.app import create_app
from pglogq.health import Thresholds

__all__ = ["Thresholds", "create_app"]
