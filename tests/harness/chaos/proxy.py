"""A fault-injecting TCP proxy for the PostgreSQL wire protocol (asyncio).

Clients connect to the proxy, the proxy connects to the server.  It parses the client → server
stream into protocol messages (the server → client stream is relayed as bytes) so it can cut a
connection at the most interesting moment: right after a ``COMMIT`` (simple query) or a ``Sync``
(the end of an extended-protocol statement, where an autocommit statement commits) has been
forwarded, before the server's reply reaches the client.  The client then cannot know whether
its transaction committed: it must report the send as indeterminate.

Faults (counted in :attr:`FaultyProxy.counts`):

* ``proxy_drop_after_commit`` — with probability ``p_commit``, after forwarding COMMIT / Sync;
* ``proxy_drop_mid_stream`` — with probability ``p_message`` after any other client message;
* ``proxy_partition`` — :meth:`partition`: cut every connection and refuse new ones for a while.

Run it in a thread of the harness with :meth:`start_in_thread`; ``enabled = False`` turns the
random faults off (for the final drain).
"""

from __future__ import annotations

import asyncio
import contextlib
import random
import struct
import threading
import time
from collections import Counter

SSL_REQUEST = 80877103
GSSENC_REQUEST = 80877104
CANCEL_REQUEST = 80877102


class _Link:
    """One proxied connection."""

    def __init__(self, client: asyncio.StreamWriter, server: asyncio.StreamWriter) -> None:
        self.client = client
        self.server = server
        self.cut = False

    def abort(self, server_grace: float = 0.0) -> None:
        """Reset the client side now; close the server side after ``server_grace`` seconds, so
        that a COMMIT already forwarded is read and executed by the server."""
        if self.cut:
            return
        self.cut = True
        self.client.transport.abort()
        if server_grace > 0:
            asyncio.get_running_loop().call_later(server_grace, self.server.transport.abort)
        else:
            self.server.transport.abort()


class FaultyProxy:
    def __init__(
        self,
        listen_port: int,
        target_port: int,
        *,
        seed: int,
        p_commit: float = 0.02,
        p_message: float = 0.002,
        host: str = "127.0.0.1",
    ) -> None:
        self.listen_port = listen_port
        self.target_port = target_port
        self.host = host
        self.p_commit = p_commit
        self.p_message = p_message
        self.enabled = True
        self.counts: Counter[str] = Counter()
        self._rng = random.Random(seed)
        self._links: set[_Link] = set()
        self._refuse_until = 0.0
        self._loop: asyncio.AbstractEventLoop | None = None
        self._thread: threading.Thread | None = None
        self._server: asyncio.Server | None = None
        self._ready = threading.Event()

    # -- lifecycle --------------------------------------------------------------------------

    def start_in_thread(self) -> None:
        self._thread = threading.Thread(target=self._run, name="chaos-proxy", daemon=True)
        self._thread.start()
        if not self._ready.wait(10):
            raise RuntimeError("the chaos proxy did not start")

    def _run(self) -> None:
        loop = asyncio.new_event_loop()
        self._loop = loop
        asyncio.set_event_loop(loop)
        self._server = loop.run_until_complete(
            asyncio.start_server(self._handle, self.host, self.listen_port, reuse_address=True)
        )
        self._ready.set()
        loop.run_forever()
        self._server.close()
        for link in list(self._links):
            link.abort()
        loop.run_until_complete(asyncio.sleep(0.1))
        loop.close()

    def stop(self) -> None:
        if self._loop is not None and self._thread is not None:
            self._loop.call_soon_threadsafe(self._loop.stop)
            self._thread.join(10)

    def partition(self, seconds: float) -> None:
        """Cut every open connection and refuse new ones for ``seconds`` (thread-safe)."""

        def go() -> None:
            self.counts["proxy_partition"] += 1
            self._refuse_until = time.monotonic() + seconds
            for link in list(self._links):
                link.abort()

        if self._loop is not None:
            self._loop.call_soon_threadsafe(go)

    # -- one connection ---------------------------------------------------------------------

    async def _handle(self, creader: asyncio.StreamReader, cwriter: asyncio.StreamWriter) -> None:
        if time.monotonic() < self._refuse_until:
            cwriter.transport.abort()
            return
        try:
            sreader, swriter = await asyncio.wait_for(
                asyncio.open_connection(self.host, self.target_port), 5
            )
        except (OSError, asyncio.TimeoutError):
            cwriter.transport.abort()
            return
        link = _Link(cwriter, swriter)
        self._links.add(link)
        up = asyncio.ensure_future(self._client_to_server(creader, link))
        down = asyncio.ensure_future(self._server_to_client(sreader, link))
        try:
            await asyncio.wait({up, down}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for task in (up, down):
                task.cancel()
            for task in (up, down):
                with contextlib.suppress(BaseException):
                    await task
            if not link.cut:
                link.cut = True
                cwriter.transport.abort()
                swriter.transport.abort()
            self._links.discard(link)

    async def _server_to_client(self, sreader: asyncio.StreamReader, link: _Link) -> None:
        while not link.cut:
            data = await sreader.read(65536)
            if not data or link.cut:
                return
            link.client.write(data)
            await link.client.drain()

    async def _client_to_server(self, creader: asyncio.StreamReader, link: _Link) -> None:
        # startup phase: length-prefixed packets without a type byte (SSL/GSS requests first)
        while True:
            head = await creader.readexactly(8)
            length, code = struct.unpack("!ii", head)
            rest = await creader.readexactly(length - 8)
            link.server.write(head + rest)
            await link.server.drain()
            if code == CANCEL_REQUEST:
                return
            if code not in (SSL_REQUEST, GSSENC_REQUEST):
                break
        while not link.cut:
            kind = await creader.readexactly(1)
            (length,) = struct.unpack("!i", await creader.readexactly(4))
            body = await creader.readexactly(length - 4)
            link.server.write(kind + struct.pack("!i", length) + body)
            await link.server.drain()
            if not self.enabled:
                continue
            commits = kind == b"S" or (kind == b"Q" and body.lstrip()[:6].upper() == b"COMMIT")
            if commits and self._rng.random() < self.p_commit:
                self.counts["proxy_drop_after_commit"] += 1
                link.abort(server_grace=0.3)
                return
            if not commits and kind != b"X" and self._rng.random() < self.p_message:
                self.counts["proxy_drop_mid_stream"] += 1
                link.abort()
                return
