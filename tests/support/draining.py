"""The one drain helper: receive and acknowledge until a consumer has nothing ready."""

from __future__ import annotations

from typing import Any

import pglogq


def drain(
    client: Any, queue: str, consumer: str, *, worker: str | None = None, page: int = 500
) -> list[pglogq.Message]:
    """Receive and ack pages of ``page`` messages until an empty batch; return what came, in order.

    ``client`` is a Client or the ``api`` fixture (an AsyncClient driven synchronously).
    """
    got: list[pglogq.Message] = []
    while True:
        batch = client.receive(queue, consumer, max_messages=page, worker=worker)
        if not batch:
            return got
        got.extend(batch)
        batch.ack()
