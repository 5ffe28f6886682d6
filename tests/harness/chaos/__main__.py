"""``python -m tests.harness.chaos --seed N --duration SECONDS [--mode retention|keyed|share|sharded] [--partitions N]
[--out FILE] [--markdown FILE]``.

Exit status 0 when every subscriber has lost = 0, unexpected = 0, skipped_within_limit = 0,
per_key_order_violations = 0 and same_key_in_flight = 0 (and the drain finished), 1 otherwise.
``--mode retention`` adds retention passes with a small ``max_consumer_lag`` and schema
re-installs while the run goes on.  ``--mode keyed`` runs on a queue of ``--partitions``
partitions (default 4) with keyed events and checks the order of each key and that no key is
in flight at two workers at once.  ``--mode share`` makes the cooperating consumer a share
consumer of three worker processes (leases of the next events, any idle worker), kills workers
holding leases so that others take them over, and fails when one event was in flight at two
live workers at once (``same_event_in_flight``).  ``--mode sharded`` runs one queue across three servers
(a cluster of three shards; :mod:`.sharded`): keyed producers through a ShardedClient,
cooperating Consumers, slot moves back and forth and an immediate stop of one shard; it also
fails on duplicates not explained by a crash.
"""

from __future__ import annotations

import signal
import sys
from pathlib import Path
from typing import NoReturn

import click

from tests.harness.chaos.harness import KEYED_PARTITIONS, Harness, write_report
from tests.harness.chaos.report import render_markdown


@click.command()
@click.option("--seed", type=int, default=1, show_default=True, help="Seeds the fault schedule.")
@click.option("--duration", type=float, default=60.0, show_default=True, help="Seconds of faults.")
@click.option("--out", type=click.Path(dir_okay=False, path_type=Path), help="Write the JSON report here.")
@click.option("--markdown", type=click.Path(dir_okay=False, path_type=Path), help="Also write the figures as Markdown.")
@click.option("--mode", type=click.Choice(["plain", "retention", "keyed", "share", "sharded"]), default="plain",
              show_default=True,
              help="retention: also retention passes (max_consumer_lag 2 s) and schema re-installs; "
                   "keyed: a partitioned queue, keyed events, per-key order and in-flight checks; "
                   "share: c3 a share consumer of three workers, lease holders killed, no event at two "
                   "live workers at once; "
                   "sharded: one queue across three servers, slot moves and a shard's crash.")
@click.option("--partitions", type=click.IntRange(2, 1024),
              help=f"The queue's partitions in the keyed mode [default: {KEYED_PARTITIONS}].")
@click.option("--settle-moves", type=float, default=0.0, show_default=True,
              help="sharded: before each slot move, wait up to this many seconds until no consumer is gated "
                   "by an earlier move (0: move on the schedule, whatever the gates).")
@click.option("--keep", is_flag=True, help="Keep the server and history directory afterwards.")
@click.option("--quiet", is_flag=True, help="No progress lines on stderr.")
def main(
    seed: int, duration: float, mode: str, partitions: int | None, out: Path | None, markdown: Path | None,
    keep: bool, quiet: bool, settle_moves: float
) -> None:
    """Run the total-queue chaos check on a throw-away PostgreSQL."""
    if partitions is not None and mode != "keyed":
        raise click.UsageError("--partitions goes with --mode keyed")
    if mode == "keyed" and partitions is None:
        partitions = KEYED_PARTITIONS

    def stop(*_: object) -> NoReturn:
        raise SystemExit(2)  # unwinds through the harness's teardown (processes, server, files)

    signal.signal(signal.SIGTERM, stop)
    if mode == "sharded":
        from tests.harness.chaos.sharded import ShardedHarness

        report = ShardedHarness(seed=seed, duration=duration, keep=keep, verbose=not quiet,
                                settle_moves=settle_moves).run()
        write_report(report, out)
        if markdown is not None:
            markdown.write_text(render_markdown(report))
        sys.exit(0 if report["passed"] else 1)
    report = Harness(seed=seed, duration=duration, mode=None if mode == "plain" else mode,
                     partitions=partitions or 1, keep=keep, verbose=not quiet).run()
    write_report(report, out)
    if markdown is not None:
        markdown.write_text(render_markdown(report))
    sys.exit(0 if report["passed"] else 1)


if __name__ == "__main__":
    main()
