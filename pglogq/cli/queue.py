"""``pglogq queue``: create, drop, list, configure, pause and resume queues."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import click

from pglogq.cli import queries as cq
from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.confirm import confirm, yes_option
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import duration, emit_json, fmt, print_table, size
from pglogq.errors import QueueInUse, translate

CONFIG_PARAMS = [
    "paused", "rotation_period", "ticker_max_count", "ticker_max_lag", "ticker_idle_period",
    "batch_max_events", "big_batch_events", "max_retries", "retry_delay", "max_payload_bytes",
    "idempotency_window", "dead_interval", "max_consumer_lag", "history_retention", "max_result_bytes",
]


def parse_setting(text: str) -> tuple[str, str]:
    """``param=value`` → (param, value)."""
    param, sep, value = text.partition("=")
    if not sep or not param.strip():
        raise click.BadParameter(f"expected PARAM=VALUE, got {text!r}", param_hint="'--set'")
    return param.strip(), value.strip()


# settings whose 0 has a meaning of its own, said next to it
ZERO_MEANS = {"max_consumer_lag": "off", "ticker_max_lag": "tick at once", "history_retention": "off"}


def setting_text(param: str, value: Any) -> str:
    """A setting's value for people: durations in pglogq's one format (``6s``, ``1d``), which
    ``--set`` and ``queue config`` accept back."""
    text = fmt(value)
    if isinstance(value, timedelta) and not value and param in ZERO_MEANS:
        return f"{text} ({ZERO_MEANS[param]})"
    return text


def queue_config(app: App, name: str) -> dict[str, Any]:
    import psycopg

    try:
        cur = app.conn.execute(cq.QUEUE_CONFIG, (name,))  # unknown queue → PQ001 with a hint
    except psycopg.Error as exc:
        raise translate(exc) from exc
    row = cur.fetchone()
    assert row is not None and cur.description is not None
    return {d.name: v for d, v in zip(cur.description, row, strict=True)}


@click.group()
@common_options
def queue() -> None:
    """Create, drop, list and configure queues."""


@queue.command()
@click.argument("name")
@click.option("--set", "settings", multiple=True, metavar="PARAM=VALUE",
              help="A setting to apply after creating (repeatable), e.g. --set ticker_max_lag=100ms.")
@click.option("--partitions", type=click.IntRange(1, 1024), default=1, show_default=True,
              help="Partitions (1..1024, fixed for the queue's life): events of one --event-key go to "
                   "one partition, handled in order; each consumer's workers share the partitions.")
@click.option("--urgent-lane", is_flag=True,
              help="Events above priority 100 are urgent: consumers get them at their next receive, ahead of "
                   "a waiting backlog (only with one partition; fixed for the queue's life).")
@common_options
@json_option
@pass_app
def create(app: App, name: str, settings: tuple[str, ...], partitions: int, urgent_lane: bool) -> None:
    """Create queue NAME (nothing changes if it exists already, whatever its partitions).

    The queue and every --set go in one transaction: when a setting is refused, nothing is
    created or changed.

    JSON: {"queue": str, "created": bool, "config": {param: value}}
    """
    pairs = [parse_setting(s) for s in settings]
    with app.conn.transaction():  # all or nothing
        created = app.client.create_queue(name, partitions=partitions, urgent_lane=urgent_lane, conn=app.conn)
        for p, v in pairs:
            app.client.set_queue_config(name, p, v, conn=app.conn)
    cfg = queue_config(app, name) if pairs else {}
    applied = {p: cfg.get(p) for p, _v in pairs}
    if app.json:
        emit_json({"queue": name, "created": created, "config": applied})
        return
    parts = f" with {partitions} partitions" if partitions > 1 else " with an urgent lane" if urgent_lane else ""
    click.echo(f"queue {name!r} created{parts}" if created else f"queue {name!r} exists already (nothing created)")
    for p, shown in applied.items():
        click.echo(f"  {p} = {setting_text(p, shown)}")


@queue.command()
@click.argument("name")
@click.option("--force", is_flag=True, help="Drop even while consumers are subscribed.")
@yes_option
@common_options
@json_option
@pass_app
def drop(app: App, name: str, force: bool, yes: bool) -> None:
    """Drop queue NAME with all its events, consumers and dead letters (asks first).

    JSON: {"queue": str, "dropped": bool, "events": int}
    """
    infos = app.client.queue_info(name, conn=app.conn)
    row = app.conn.execute(cq.STORED_EVENTS, (name,)).fetchone()
    events = int(row[0]) if row else 0
    consumers = infos[0].consumers if infos else 0
    confirm(f"Drop queue {name!r} with {events} stored event(s) and {consumers} consumer(s)?", yes=yes)
    try:
        dropped = app.client.drop_queue(name, force=force, conn=app.conn)
    except QueueInUse as exc:
        raise CliError(exc.message, Exit.CONFLICT, hint="unsubscribe them first, or pass --force") from exc
    if app.json:
        emit_json({"queue": name, "dropped": dropped, "events": events})
    else:
        click.echo(f"queue {name!r} dropped ({events} event(s))" if dropped else f"no queue {name!r}")


@queue.command("list")
@common_options
@json_option
@pass_app
def list_(app: App) -> None:
    """List queues with their rate, last tick age, backlog and size.

    JSON: [{"queue_name", "paused", "last_tick_id", "last_tick_time", "last_tick_age",
    "ticker_lag", "events_per_second", "pending_estimate", "consumers", "retry_depth",
    "dead_letters", "delayed", "size_bytes", "rotation_period", "last_rotation",
    "rotation_blocked_by", "partitions", "urgent_lane"}]
    """
    rows = app.client.queue_info(conn=app.conn)
    if app.json:
        emit_json(rows)
        return
    print_table(
        ["queue", "paused", "consumers", "ev/s", "last tick", "unticked", "dead", "size"],
        [[r.queue_name, r.paused, r.consumers, r.events_per_second, duration(r.last_tick_age),
          r.pending_estimate, r.dead_letters, size(r.size_bytes)] for r in rows],
        right=["consumers", "ev/s", "last tick", "unticked", "dead", "size"],
        empty="no queues (create one with `pglogq queue create NAME`)",
    )


@queue.command()
@click.argument("name")
@click.argument("param", required=False)
@click.argument("value", required=False)
@common_options
@json_option
@pass_app
def config(app: App, name: str, param: str | None, value: str | None) -> None:
    """Show every setting of queue NAME, show one (PARAM), or change one (PARAM VALUE).

    \b
    Settings: paused, rotation_period, ticker_max_count, ticker_max_lag,
    ticker_idle_period, batch_max_events, big_batch_events, max_retries,
    retry_delay, max_payload_bytes, idempotency_window, dead_interval,
    max_consumer_lag, history_retention, max_result_bytes (see the configuration
    reference for each); the layout,
    partitions and urgent_lane, changes only while nothing is in flight.

    JSON: {"queue": str, "config": {param: value}} (intervals in seconds); after a change
    {"queue": str, "param": str, "value": str}
    """
    if param is not None and value is not None:
        changed = app.client.set_queue_config(name, param, value, conn=app.conn)
        # the layout (partitions, urgent_lane) is not among queue_config's settings
        new = queue_config(app, name).get(param, changed)
        if app.json:
            emit_json({"queue": name, "param": param, "value": new})
        else:
            click.echo(f"{name}: {param} = {setting_text(param, new)}")
        return
    cfg = queue_config(app, name)
    if param is not None:
        if param not in cfg:
            raise CliError(f"unknown queue parameter {param!r}", Exit.INVALID,
                           hint="one of " + ", ".join(CONFIG_PARAMS))
        cfg = {param: cfg[param]}
    if app.json:
        emit_json({"queue": name, "config": cfg})
        return
    print_table(["parameter", "value"], [[k, setting_text(k, v)] for k, v in cfg.items()])


def _pause(app: App, name: str, paused: bool) -> None:
    app.client.set_queue_config(name, "paused", paused, conn=app.conn)
    if app.json:
        emit_json({"queue": name, "paused": paused})
    elif paused:
        click.echo(f"queue {name!r} paused: sends still append, no ticks until `pglogq queue resume {name}`")
    else:
        click.echo(f"queue {name!r} resumed")


@queue.command()
@click.argument("name")
@common_options
@json_option
@pass_app
def pause(app: App, name: str) -> None:
    """Stop ticking queue NAME (producers keep appending; consumers get nothing new).

    JSON: {"queue": str, "paused": true}
    """
    _pause(app, name, True)


@queue.command()
@click.argument("name")
@common_options
@json_option
@pass_app
def resume(app: App, name: str) -> None:
    """Tick queue NAME again after `pglogq queue pause`.

    JSON: {"queue": str, "paused": false}
    """
    _pause(app, name, False)


TYPE_PARAMS = ["max_retries", "retry_delay", "retry_factor", "retry_cap", "retry_jitter"]


@queue.command("type-config")
@click.argument("name")
@click.argument("type_", metavar="TYPE", required=False)
@click.argument("param", required=False)
@click.argument("value", required=False)
@click.option("--reset", is_flag=True, help="Remove the override PARAM of TYPE (the queue's setting applies).")
@common_options
@json_option
@pass_app
def type_config(app: App, name: str, type_: str | None, param: str | None, value: str | None, reset: bool) -> None:
    """Show the per-type overrides of queue NAME, or change one (TYPE PARAM VALUE).

    \b
    Parameters: max_retries (0: the first failure dead-letters), retry_delay,
    retry_factor (1: fixed delay), retry_cap, retry_jitter: the retry policy of the
    events of TYPE, in place of the queue's max_retries and retry_delay.

    JSON: [{"type", "max_retries", "retry_delay", "retry_factor", "retry_cap", "retry_jitter"}];
    after a change {"queue", "type", "param", "value"}
    """
    if param is not None:
        if type_ is None:
            raise click.UsageError("TYPE is needed with PARAM")
        if (value is None) != reset:
            raise click.UsageError("give VALUE, or --reset to remove the override")
        new = app.client.set_type_config(name, type_, param, value, conn=app.conn)
        if app.json:
            emit_json({"queue": name, "type": type_, "param": param, "value": new})
        else:
            click.echo(f"{name}: type {type_}: {param} = {new if new is not None else '(the queue setting)'}")
        return
    rows = [r for r in app.client.type_config(name, conn=app.conn) if type_ is None or r.type == type_]
    if app.json:
        from dataclasses import asdict

        emit_json([asdict(r) for r in rows])
        return
    print_table(
        ["type", *TYPE_PARAMS],
        [[r.type, *(fmt(getattr(r, p)) if getattr(r, p) is not None else "(queue)" for p in TYPE_PARAMS)]
         for r in rows],
        empty="no per-type settings: every type uses the queue's",
    )
