"""``pglogq consumer``: subscribe, unsubscribe, list and seek consumers; list share consumers' leases."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import click

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.confirm import confirm, yes_option
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import ago, console, duration, emit_json, fmt, print_table, short, table
from pglogq.cli.params import Int8, seek_position_callback
from pglogq.errors import BatchOpen, UnknownConsumer
from pglogq.models import ConsumerInfo, Lease, SeekPlan


@click.group()
@common_options
def consumer() -> None:
    """Subscribe, unsubscribe, list and seek consumers; the leases of share consumers."""


@consumer.command()
@click.argument("queue")
@click.argument("name")
@click.option("--share", is_flag=True,
              help="A share consumer: its workers each take the next events no other worker holds (any idle"
                   " worker takes the next job); every receive names its worker.")
@click.option("--lanes", is_flag=True,
              help="With --share: workers cut their leases on eight lanes side by side (throughput with many"
                   " workers; hand-out order kept within a lane only).")
@common_options
@json_option
@pass_app
def subscribe(app: App, queue: str, name: str, share: bool, lanes: bool) -> None:
    """Subscribe consumer NAME to QUEUE: it gets the events ticked from now on.

    With --share, a share consumer: for job workloads, where a slow job must never hold back the
    others while a worker is idle (a consumer keeps its mode).  With --lanes too, its workers
    cut their leases side by side on eight lanes: for many workers taking small leases.

    JSON: {"queue": str, "consumer": str, "share": bool, "lanes": bool, "subscribed": bool}
    """
    done = app.client.subscribe(queue, name, share=share, lanes=lanes, conn=app.conn)
    kind = "share consumer" if share else "consumer"
    if app.json:
        emit_json({"queue": queue, "consumer": name, "share": share, "lanes": lanes, "subscribed": done})
    else:
        click.echo(f"{kind} {name!r} subscribed to {queue!r}" if done
                   else f"{kind} {name!r} was subscribed to {queue!r} already (nothing changed)")


@consumer.command()
@click.argument("queue")
@click.argument("name")
@yes_option
@common_options
@json_option
@pass_app
def unsubscribe(app: App, queue: str, name: str, yes: bool) -> None:
    """Remove consumer NAME from QUEUE, with its workers, retries and dead letters (asks first).

    JSON: {"queue": str, "consumer": str, "unsubscribed": bool}
    """
    try:
        infos = app.client.consumer_info(queue, name, conn=app.conn)
    except UnknownConsumer:  # not subscribed: unsubscribe says so (an unknown queue stays an error)
        infos = []
    if infos:
        i = infos[0]
        confirm(f"Unsubscribe {name!r} from {queue!r} ({i.lag_events or 0} unread event(s), "
                f"{i.retry_depth} retrying, {i.dead_letters} dead letter(s) are dropped)?", yes=yes)
    done = app.client.unsubscribe(queue, name, conn=app.conn)
    if app.json:
        emit_json({"queue": queue, "consumer": name, "unsubscribed": done})
    else:
        click.echo(f"consumer {name!r} unsubscribed from {queue!r}" if done
                   else f"consumer {name!r} is not subscribed to {queue!r}")


@consumer.command("list")
@click.argument("queue", required=False)
@common_options
@json_option
@pass_app
def list_(app: App, queue: str | None) -> None:
    """List consumers (of QUEUE, or of every queue) with their pending events and lag.

    Pending: events ticked and not yet acknowledged (open batches and leases included); lag: the
    age of the oldest pending event, from its tick (0 when nothing is pending); unread: ticked
    events not yet handed to any worker (JSON "lag_events").

    JSON: [{"queue_name", "consumer_name", "last_tick", "lag" (s), "lag_events" (unread),
    "pending_events", "last_seen", "batch_id", "batch_open_since", "workers", "open_batches",
    "retry_depth", "dead_letters", "skipped_events", "skipped_at", "share", "in_flight_events",
    "oldest_in_flight" (s), "expired_leases", "redelivered"}] (the last four: null for an
    ordinary consumer); a share consumer's name is marked "(share)" in the table, and its
    "in flight" column counts its leased events (with the leases past expiry).
    """
    rows = app.client.consumer_info(queue, conn=app.conn)  # unknown queue → not found (3), not an empty list
    if app.json:
        emit_json(rows)
        return
    print_table(
        ["queue", "consumer", "pending", "lag", "unread", "last seen", "open", "dead"],
        [[r.queue_name, r.consumer_name + (" (share)" if r.share else ""), r.pending_events, duration(r.lag),
          r.lag_events, ago(r.last_seen), r.open_batches, r.dead_letters] for r in rows],
        right=["pending", "lag", "unread", "open", "dead"],
        empty="no consumers",
    )
    shares = share_table(rows)
    if shares is not None:
        console().print(shares)


def share_table(rows: list[ConsumerInfo]) -> Any:
    """The share consumers' leases in one table (None when there is no share consumer)."""
    shares = [r for r in rows if r.in_flight_events is not None]
    if not shares:
        return None
    return table(
        ["queue", "share consumer", "in flight", "oldest", "expired leases", "redelivered"],
        [[r.queue_name, r.consumer_name, r.in_flight_events, duration(r.oldest_in_flight), r.expired_leases,
          r.redelivered] for r in shares],
        title="Share consumers (leased events)", right=["in flight", "oldest", "expired leases", "redelivered"],
        overflow="ellipsis",
    )


def lock(x: Lease, now: datetime | None = None) -> str:
    """When a lease's lock ends, as a table cell."""
    now = now or datetime.now(x.expires_at.tzinfo)
    if x.worker is None:
        return "ceded"
    if x.expired:
        return "released" if x.released else "expired " + duration(now - x.expires_at) + " ago"
    return "in " + duration(x.expires_at - now)


@consumer.command()
@click.argument("queue", required=False)
@click.argument("name", required=False)
@common_options
@json_option
@pass_app
def leases(app: App, queue: str | None, name: str | None) -> None:
    """List the leases of share consumers (of QUEUE, or consumer NAME of QUEUE): who holds what.

    One row per lease a worker holds: its worker ("-": a tail its worker ceded, free for the
    next worker that asks), its events (leased, not acknowledged) and how many of them a
    handler started, when its lock ends unless renewed (its last heartbeat + the queue's
    dead_interval; "expired": the next receive of any worker takes it over), and the highest
    delivery count of its events (1: first delivery; each nack, and each crash of a started
    handler, adds one) with how many of them were delivered before.  An ordinary consumer has
    no leases.

    JSON: [{"queue_name", "consumer_name", "worker", "batch_id", "events", "returned",
    "started", "first_msg_id", "last_msg_id", "leased_at", "last_heartbeat", "expires_at",
    "expired", "released", "max_delivery_count", "redelivered"}]
    """
    rows = app.client.leases(queue, name, conn=app.conn)
    if app.json:
        emit_json(rows)
        return
    print_table(*lease_rows(rows), empty="no leases", overflow="ellipsis")


def lease_rows(rows: list[Lease]) -> tuple[list[str], list[list[Any]]]:
    """The columns and rows of a table of leases (``consumer leases``, ``status``)."""
    now = datetime.now().astimezone()
    return (["consumer", "worker", "events", "started", "lock", "deliveries"],
            [[f"{x.queue_name}/{x.consumer_name}", short(x.worker or "-", 22), x.events, x.started, lock(x, now),
              "-" if x.max_delivery_count is None else
              f"{x.max_delivery_count}" + (f" ({x.redelivered} again)" if x.redelivered else "")]
             for x in rows])


def describe_plan(queue: str, name: str, plan: SeekPlan) -> list[str]:
    delta = plan.delta_events
    if delta is None:
        effect = "an unknown number of events (the current tick is gone)"
    elif delta < 0:
        effect = f"replays about {-delta:,} event(s)"
    elif delta > 0:
        effect = f"skips about {delta:,} event(s)"
    else:
        effect = "changes nothing (already there)"
    lines = [
        f"consumer {name!r} on queue {queue!r}",
        f"  now at     tick {plan.current_tick} ({fmt(plan.current_tick_time)})",
        f"  would go   tick {plan.target_tick} ({fmt(plan.target_tick_time)})",
        f"  effect     {effect}",
        f"  kept       ticks {plan.earliest_tick} ({fmt(plan.earliest_tick_time)})"
        f" to {plan.latest_tick} ({fmt(plan.latest_tick_time)})",
    ]
    if plan.open_batches:
        lines.append(f"  open       {plan.open_batches} batch(es) open: seek needs --force to drop them")
    return lines


@consumer.command()
@click.argument("queue")
@click.argument("name")
@click.option("--to", "to", metavar="POSITION", callback=seek_position_callback,
              help="earliest | latest | a tick id | a timestamp ('2026-05-01 12:00+00', '15 minutes ago').")
@click.option("--by", "by", type=Int8("count"), metavar="[-+]N",
              help="Move by about N events: -N replays, +N skips.")
@click.option("--execute", is_flag=True, help="Apply the plan (without it, only print it).")
@click.option("--force", is_flag=True, help="Also when a batch is open: drop the open batch(es).")
@common_options
@json_option
@pass_app
def seek(app: App, queue: str, name: str, to: str | None, by: int | None, execute: bool, force: bool) -> None:
    """Move consumer NAME's cursor to replay or skip events.

    Prints the plan (where the consumer is, where it would go, about how many events that
    replays or skips); applies it only with --execute.  The target must lie within what the
    queue still keeps (rotation truncates older events).  Refused while a batch is open unless
    --force.  Example: pglogq consumer seek orders billing --by -1000 --execute

    JSON: {"queue", "consumer", "executed": bool, "current_tick", "current_tick_time",
    "target_tick", "target_tick_time", "delta_events" (negative: replayed, positive: skipped),
    "earliest_tick", "earliest_tick_time", "latest_tick", "latest_tick_time", "open_batches"}
    """
    if (to is None) == (by is None):
        raise click.UsageError("give exactly one of --to and --by")
    if execute:
        try:
            plan = app.client.seek(queue, name, to=to, by_events=by, force=force, conn=app.conn)
        except BatchOpen as exc:
            raise CliError(exc.message, Exit.CONFLICT,
                           hint="let its workers ack, or pass --force to drop the open batch(es)") from exc
    else:
        plan = app.client.seek_plan(queue, name, to=to, by_events=by, conn=app.conn)
    if app.json:
        from pglogq.cli.output import jsonable

        emit_json({"queue": queue, "consumer": name, "executed": execute, **jsonable(plan)})
        return
    for line in describe_plan(queue, name, plan):
        click.echo(line)
    if execute:
        click.echo(f"done: consumer {name!r} now continues after tick {plan.target_tick}")
    else:
        click.echo("plan only: add --execute to apply it")
