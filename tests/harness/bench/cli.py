"""``python -m tests.harness.bench``: run the scenarios, print the table, write JSON, Markdown and plots."""

from __future__ import annotations

import importlib
import os
import signal
import time
import traceback
from pathlib import Path
from typing import Any

import click

from pglogq.dsn import resolve_dsn
from tests.harness.bench import machine, payload
from tests.harness.bench.context import BenchContext, bench_database
from tests.harness.bench.results import ImpossibleFigures, text_table
from tests.harness.bench.settings import FULL, QUICK
from tests.harness.bench.systems import ALL, System, pgque_system


def system_key(cls: type[System]) -> str:
    """The name a system is selected by with --systems: the first word of its name, lower case."""
    return cls.key or cls.name.split()[0].lower()


SCENARIOS = ("produce", "consume", "latency", "fanout", "held_xmin", "large_batch", "partitions", "vip", "jobs_mix",
             "share_jobs", "shards", "queues", "history", "growth")


def _parse_only(value: str | None) -> tuple[str, ...]:
    if not value:
        return SCENARIOS
    chosen = tuple(v.strip() for v in value.split(",") if v.strip())
    bad = [c for c in chosen if c not in SCENARIOS]
    if bad:
        raise click.BadParameter(f"unknown scenario(s) {', '.join(bad)}; choose from {', '.join(SCENARIOS)}")
    return chosen


@click.command(name="bench")
@click.option("--quick", is_flag=True, help="Small and short: a smoke run of 2-3 minutes.")
@click.option("--only", metavar="SCENARIO,...",
              help=f"Run only these scenarios (of {', '.join(SCENARIOS)}).")
@click.option("--out", type=click.Path(file_okay=False, path_type=Path), default=Path("docs/benchmarks"),
              show_default=True, help="Where to write results.json, README-style report and plots.")
@click.option("--dsn", help="PostgreSQL server to use (default: $PGLOGQ_DSN, else the embedded one).")
@click.option("--held-seconds", type=float, help="Override each held-xmin phase's duration.")
@click.option("--share-held-seconds", type=float,
              help="Override share_jobs' time under the held snapshot (full run: 600 s, --quick: 3 s).")
@click.option("--queues-hot", metavar="N,...",
              help="queues scenario: also measure send, receive and ack at these database sizes (e.g. 10000).")
@click.option("--history-outcomes", type=int, metavar="N",
              help="history scenario: outcomes jobs() pages through (full run: 1,000,000, --quick: 20,000).")
@click.option("--systems", "only_systems", metavar="NAME,...",
              help="Run only these systems (of " + ", ".join(system_key(c) for c in ALL) + ").")
@click.option("--pgque-sql", type=click.Path(dir_okay=False, exists=True),
              help="PgQue's install file (sql/pgque.sql of github.com/NikolayS/PgQue); default "
                   "$PGLOGQ_BENCH_PGQUE_SQL, else read by git from $PGLOGQ_BENCH_PGQUE_REPO.")
def command(quick: bool, only: str | None, out: Path, dsn: str | None, held_seconds: float | None,
            only_systems: str | None, pgque_sql: str | None, share_held_seconds: float | None,
            queues_hot: str | None, history_outcomes: int | None) -> None:
    """Benchmark pglogq against the PostgreSQL ceiling and the alternatives, in one run.

    Creates a dedicated database on the server, installs every system's schema there, and drops
    it at the end.  Redis is started by the bench itself; RabbitMQ is expected on 127.0.0.1:5672.
    """
    scenarios = _parse_only(only)
    chosen = _parse_systems(only_systems)
    if pgque_sql:
        os.environ[pgque_system.SQL_ENV] = str(Path(pgque_sql).resolve())  # inherited by worker processes
    signal.signal(signal.SIGINT, _on_signal)
    signal.signal(signal.SIGTERM, _on_signal)
    settings = QUICK if quick else FULL
    if held_seconds is not None:
        from dataclasses import replace

        settings = replace(settings, held_seconds=held_seconds)
    if share_held_seconds is not None:
        from dataclasses import replace

        settings = replace(settings, share_held_seconds=share_held_seconds)
    if queues_hot:
        from dataclasses import replace

        settings = replace(settings, queue_hot_counts=tuple(int(x) for x in queues_hot.split(",") if x.strip()))
    if history_outcomes is not None:
        from dataclasses import replace

        settings = replace(settings, history_outcomes=history_outcomes)
    admin_dsn = resolve_dsn(dsn)
    started = time.time()
    click.echo(f"side-by-side bench ({'quick' if quick else 'full'}): {', '.join(scenarios)}")
    with bench_database(admin_dsn) as bench_dsn:
        ctx = BenchContext(admin_dsn=admin_dsn, dsn=bench_dsn, settings=settings)
        info = machine.describe(bench_dsn)
        systems = _start_systems(ctx, chosen)
        try:
            for name in scenarios:
                click.echo(f"\n== {name} ==")
                t0 = time.time()
                try:
                    module = importlib.import_module(f"tests.harness.bench.{name}")
                    module.run(ctx, systems)
                except Exception as exc:  # keep going: one broken scenario must not hide the rest
                    if _interrupted:  # Ctrl-C inside a query surfaces as QueryCanceled: stop
                        raise KeyboardInterrupt from exc
                    traceback.print_exc()
                    ctx.results.skip(name, "all", f"the scenario failed: {type(exc).__name__}: {exc}")
                ctx.results.details.setdefault("scenario_seconds", {})[name] = round(time.time() - t0, 1)
                click.echo(f"   ({name}: {time.time() - t0:.1f} s)")
        finally:
            for s in systems:
                try:
                    s.teardown()
                except Exception:
                    traceback.print_exc()
            ctx.close(interrupted=_interrupted)
        info["machine"]["load_average_at_end"] = machine.load()
        info["versions"] = {s.name: s.version() for s in systems}
        info["durability"] = {s.name: s.durability for s in systems}
    meta: dict[str, Any] = {
        "started_at": time.strftime("%Y-%m-%d %H:%M:%S %Z", time.localtime(started)),
        "duration_seconds": round(time.time() - started, 1),
        "mode": "quick" if quick else "full",
        "scenarios": list(scenarios),
        "settings": settings.to_json(),
        "payload_bytes": payload.size(),
        **info,
    }
    click.echo("\n" + text_table(ctx.results))
    from tests.harness.bench import report

    try:
        paths = report.write(out, meta, ctx.results)
    except ImpossibleFigures as exc:
        click.echo(f"\nwrote {out}/ -- but the run FAILED: {exc}", err=True)
        raise SystemExit(1) from exc
    click.echo("\nwrote " + ", ".join(str(p) for p in paths))


_interrupted = False


def _on_signal(signum: int, frame: object) -> None:
    """Ctrl-C or SIGTERM: stop the run, still cleaning up (drop the database, stop Redis)."""
    global _interrupted
    _interrupted = True
    raise KeyboardInterrupt


def _parse_systems(value: str | None) -> tuple[str, ...]:
    keys = tuple(system_key(c) for c in ALL)
    if not value:
        return keys
    chosen = tuple(v.strip().lower() for v in value.split(",") if v.strip())
    bad = [c for c in chosen if c not in keys]
    if bad:
        raise click.BadParameter(f"unknown system(s) {', '.join(bad)}; choose from {', '.join(keys)}")
    return chosen


def _start_systems(ctx: BenchContext, chosen: tuple[str, ...]) -> list[System]:
    """Every system that can run here, set up; a skip line (with the reason) for the others."""
    ready: list[System] = []
    for cls in ALL:
        if system_key(cls) not in chosen:
            ctx.results.skip("all", cls.name, "not selected (--systems)")
            continue
        system = cls(ctx)
        reason = system.unavailable()
        if reason is None:
            try:
                system.setup()
            except Exception as exc:
                reason = f"setup failed: {type(exc).__name__}: {exc}"
                traceback.print_exc()
        if reason is not None:
            ctx.results.skip("all", system.name, reason)
            continue
        ready.append(system)
    return ready
