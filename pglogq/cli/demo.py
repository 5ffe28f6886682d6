"""``pglogq demo``: the main job of pglogq in a few seconds, on the embedded PostgreSQL by default."""

from __future__ import annotations

import time
from typing import Any

import click

from pglogq.cli import queries as cq
from pglogq.cli.app import App, common_options, describe_dsn, json_option, pass_app
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import console, emit_json, info, table
from pglogq.dsn import is_embedded

CONSUMERS = ("billing", "audit")


@click.command()
@click.option("--queue", "queue", default="pglogq_demo", show_default=True,
              help="Queue to use; it is created for the run and dropped at its end.")
@click.option("--events", type=click.IntRange(2, 100000), default=10, show_default=True,
              help="How many events to produce (one send, the rest in one send_batch).")
@common_options
@json_option
@pass_app
def demo(app: App, queue: str, events: int) -> None:
    """Show pglogq at work: install, queue, two consumers, send, tick, receive, ack.

    Installs the schema (idempotent), recreates QUEUE, subscribes two consumers (billing,
    audit), sends one event with send and the rest with send_batch, ticks, lets each consumer
    receive and acknowledge every event on its own (fan-out), shows that the events are stored
    once whatever the number of consumers, and drops the queue with its consumers at the end
    (nothing is left behind: `status --check` stays green, `queue list` is as before).  Safe to
    run again.

    JSON: {"database": str, "queue": str, "dropped": bool, "sent": int, "stored_rows": int,
    "consumers": {name: {"received": int, "acked_batches": int, "all_events_once": bool}},
    "seconds": float}
    """
    t0 = time.perf_counter()
    dsn = app.dsn
    client, conn = app.client, app.conn
    if not app.json:
        where = "the embedded PostgreSQL" if is_embedded(dsn) else describe_dsn(dsn)
        info(f"demo on {where}")
    applied = client.install_schema(conn=conn)
    if not app.json:
        info("schema: " + (", ".join(applied) if applied else "already installed (re-applied functions)"))
    client.drop_queue(queue, force=True, conn=conn)
    client.create_queue(queue, conn=conn)
    for name in CONSUMERS:
        client.subscribe(queue, name, conn=conn)
    first = client.send(queue, {"order": 1, "amount": 10}, type="order.created", conn=conn)
    rest = client.send_batch(queue, [{"order": i, "amount": 10 * i} for i in range(2, events + 1)],
                             type="order.created", conn=conn)
    sent = [first, *rest]
    client.tick(queue, force=True, conn=conn)
    results: dict[str, dict[str, Any]] = {}
    for name in CONSUMERS:
        got: list[int] = []
        batches = 0
        while True:
            batch = client.receive(queue, name, max_messages=1000, conn=conn)
            if not batch:
                break
            got.extend(m.msg_id for m in batch)
            batch.ack(conn=conn)
            batches += 1
        results[name] = {"received": len(got), "acked_batches": batches, "all_events_once": got == sent}
    row = conn.execute(cq.STORED_EVENTS, (queue,)).fetchone()
    stored = int(row[0]) if row else 0
    # leave nothing behind: a subscribed consumer nobody runs falls behind with every later send,
    # makes `status --check` fail and, with a ticker running, holds back rotation; a queue nobody
    # asked for clutters `queue list` and the dashboard
    dropped = client.drop_queue(queue, force=True, conn=conn)
    dbrow = conn.execute(cq.SERVER_INFO).fetchone()
    seconds = round(time.perf_counter() - t0, 3)
    ok = all(r["all_events_once"] for r in results.values()) and stored == len(sent)
    if app.json:
        emit_json({"database": dbrow[0] if dbrow else None, "queue": queue, "dropped": bool(dropped),
                   "sent": len(sent),
                   "stored_rows": stored, "consumers": results, "seconds": seconds})
    else:
        out = console()
        out.print(f"queue {queue!r}: sent {len(sent)} events (1 with send, {len(rest)} with send_batch), "
                  "and ticked")
        t = table(["consumer", "received", "acked batches", "every event once"],
                  [[n, r["received"], r["acked_batches"], r["all_events_once"]] for n, r in results.items()],
                  right=["received", "acked batches"])
        if t is not None:
            out.print(t)
        out.print(f"stored rows: {stored} (one copy of each event, read by {len(CONSUMERS)} consumers)")
        out.print(f"queue {queue!r} dropped with its consumers: nothing is left behind")
        out.print("(`pglogq status --check` stays green, `pglogq queue list` is as before)")
        out.print(f"done in {seconds:.2f}s.  Next, try:")
        out.print("  pglogq status")
        out.print(f"  pglogq queue create {queue}")
        out.print(f"  pglogq tail {queue} --tick        (and in another terminal:)")
        out.print(f"  pglogq send {queue} '{{\"order\": 99}}'")
        out.print(f"  pglogq queue drop {queue} --yes      (when done)")
    if not ok:
        raise CliError("the demo did not deliver every event exactly once to each consumer", Exit.OTHER)
