"""Making dead letters through the client (shared by the dashboard's SQL-API tests)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import timedelta
from typing import Any

import pglogq


def dead_letters(client: pglogq.Client, queue: str, consumer: str, payloads: Sequence[Any], *,
                 type: str | None = None, reason: str = "failed", headers: dict[str, Any] | None = None) -> list[int]:
    """Send ``payloads``, nack them until each is a dead letter of ``consumer``; returns their msg ids."""
    client.set_queue_config(queue, "max_retries", 1)
    ids = client.send_batch(queue, list(payloads), type=type, headers=headers)
    wanted = set(ids)
    for _ in range(20):
        client.maintain()
        client.tick(queue, force=True)
        while True:
            batch = client.receive(queue, consumer, max_messages=1000)
            if not batch:
                break
            for m in batch:
                if m.msg_id in wanted:
                    batch.nack(m, retry_after=timedelta(0), reason=reason)
            batch.ack()
        if wanted <= {d.msg_id for d in client.dlq_search(queue, consumer, limit=1000, preview_chars=1)}:
            return ids
    raise AssertionError("the events did not all reach the dead-letter queue")
