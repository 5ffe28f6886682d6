"""``pglogq cluster``: one queue across several PostgreSQL servers (init, status, move slots, add and
remove shards); the work is :mod:`pglogq.cluster.cluster_admin`'s."""

from __future__ import annotations

import re
from typing import Any

import click

from pglogq.cli.app import App, check_dsn, common_options, debug_option, json_option, pass_app
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import emit_json, print_table
from pglogq.cluster import cluster_admin


def _slots(_ctx: click.Context, _param: click.Parameter, value: str | None) -> tuple[int, int] | None:
    if value is None:
        return None
    m = re.fullmatch(r"\s*(\d{1,5})\s*(?:-\s*(\d{1,5})\s*)?", value)
    if not m:
        raise click.BadParameter(f"expected LO-HI (or one slot), got {value!r}")
    lo = int(m.group(1))
    hi = int(m.group(2)) if m.group(2) else lo
    if not 0 <= lo <= hi < cluster_admin.SLOT_COUNT:
        raise click.BadParameter(f"slots {lo}-{hi}: use 0 <= LO <= HI <= {cluster_admin.SLOT_COUNT - 1}")
    return lo, hi


def _print_moves(moves: list[dict[str, Any]]) -> None:
    for mv in moves:
        fences = ", ".join(f"{q}@{t}" for q, t in sorted((mv.get("fences") or {}).items())) or "no queue"
        click.echo(f"  move {mv['move_id']}: slots {mv['slot_lo']}-{mv['slot_hi']} {mv['from_shard']} -> "
                   f"{mv['to_shard']} (map version {mv['map_version']}; fences: {fences})")


def _print_map(cmap: dict[str, Any]) -> None:
    counts = cluster_admin.slot_counts(cmap)
    print_table(["shard", "slots", "ranges", "dsn"],
                [[s["name"], counts[s["name"]],
                  " ".join(f"{r['lo']}-{r['hi']}" for r in cmap["ranges"] if r["shard"] == s["name"]) or "-",
                  s["dsn"]] for s in cmap["shards"]], right=["slots"])


@click.group()
@common_options
def cluster() -> None:
    """One queue across several PostgreSQL servers: shards, slots and moves."""


@cluster.command()
@click.option("--dsn", "dsns", multiple=True, required=True, metavar="DSN",
              help="A shard's database (repeat: one --dsn per shard, slots are spread in this order).")
@click.option("--name", "names", multiple=True, metavar="NAME",
              help="The shards' names, one per --dsn, in the same order (default shard0, shard1, ...).")
@click.option("--cluster-name", default=cluster_admin.DEFAULT_CLUSTER, show_default=True,
              help="The cluster's name, stored in every shard.")
@debug_option
@json_option
@pass_app
def init(app: App, dsns: tuple[str, ...], names: tuple[str, ...], cluster_name: str) -> None:
    """Make the databases of the --dsn options the shards of a new cluster.

    The 16,384 hash slots are spread in contiguous ranges of nearly equal size (map version 1).
    Every queue of those databases becomes sharded: a keyed send of a slot another shard owns
    is refused.  Running it again with the same options changes nothing (a run cut short is
    finished that way).  The map stores the DSNs without their passwords.  Each --dsn must reach
    its own database: two that reach one (the same server system identifier and database oid)
    are refused before anything is stored.

    JSON: the map {"cluster", "self", "version", "slot_count", "shards": [{"name", "dsn"}],
    "ranges": [{"lo", "hi", "shard"}], "moves": []}
    """
    for d in dsns:
        check_dsn(d, "--dsn")
    cmap = cluster_admin.init(list(dsns), list(names) or None, cluster_name=cluster_name)
    if app.json:
        emit_json(cmap)
        return
    click.echo(f"cluster {cmap['cluster']!r}: {len(cmap['shards'])} shard(s), map version {cmap['version']}")
    _print_map(cmap)


@cluster.command()
@common_options
@json_option
@pass_app
def status(app: App) -> None:
    """The cluster as each of its shards sees it (from the shard of --dsn).

    Says whether every shard answered with the same map version, and lists the unfinished moves
    (finish them with `pglogq cluster move-slots --resume`) and the finished ones whose consumer
    gates still wait.  A broken map (two shards that are one database: the same server system
    identifier and database oid, whatever their DSNs; a shard's DSN that reaches another shard)
    is a problem line and exit 11.

    JSON: {"cluster", "version", "consistent": bool, "problems": [str], "shards": [{"name", "dsn", "version",
    "reachable", "slots", "ranges": [[lo, hi]], "error"}], "moves": [{"move_id", "map_version",
    "slot_lo", "slot_hi", "from_shard", "to_shard", "states": {shard: state}, "fences",
    "gates"}], "gated_moves": [same]}
    """
    st = cluster_admin.status(app.dsn)
    if app.json:
        emit_json(st)
        _broken(st)
        return
    click.echo(f"cluster {st['cluster']!r}, map version {st['version']}: "
               + ("consistent" if st["consistent"] else "NOT consistent"))
    for problem in st["problems"]:
        click.echo(f"problem: {problem}")
    print_table(["shard", "version", "slots", "ranges", "state"],
                [[s["name"], s["version"], s["slots"], " ".join(f"{a}-{b}" for a, b in s["ranges"]) or "-",
                  "ok" if s["reachable"] else f"unreachable: {s['error']}"] for s in st["shards"]],
                right=["version", "slots"])
    for mv in st["moves"]:
        states = ", ".join(f"{k}: {v}" for k, v in sorted(mv["states"].items()))
        click.echo(f"unfinished move {mv['move_id']}: slots {mv['slot_lo']}-{mv['slot_hi']} {mv['from_shard']} -> "
                   f"{mv['to_shard']} ({states}); finish it: pglogq cluster move-slots --resume")
    for mv in st["gated_moves"]:
        click.echo(f"move {mv['move_id']} ({mv['from_shard']} -> {mv['to_shard']}): {mv['gates']} consumer gate(s) "
                   f"wait for consumers to finish {mv['from_shard']} up to the fences")
    _broken(st)


def _broken(st: dict[str, Any]) -> None:
    """Exit 11 when the map itself is broken (not merely a shard behind or a move unfinished,
    which the next command repairs)."""
    if st["problems"]:
        raise CliError(f"the shard map is broken: {'; '.join(st['problems'])}", Exit.CHECK_FAILED,
                       hint="pglogq.cluster_leave() on each shard of this map, then pglogq cluster init again")


@cluster.command("move-slots")
@click.option("--slots", callback=_slots, metavar="LO-HI", help="The slots to move (0..16383), e.g. 0-1023.")
@click.option("--to", "to_shard", metavar="NAME", help="The shard that gets them.")
@click.option("--resume", is_flag=True, help="First finish the moves a crash left half done.")
@click.option("--lock-timeout", type=click.FloatRange(0.001, 3600), default=10.0, show_default=True,
              metavar="SECONDS", help="How long an export waits for the transactions sending to its "
                                      "queues (each of 3 attempts); sends wait meanwhile.")
@common_options
@json_option
@pass_app
def move_slots(app: App, slots: tuple[int, int] | None, to_shard: str | None, resume: bool,
               lock_timeout: float) -> None:
    """Move slots LO-HI to shard --to (one move per current owner, each a new map version).

    Each move: the target imports the slots, the source exports them (it waits for the
    transactions sending to its queues) and records a fence per queue, both mark it done, and
    every other shard takes the new map.  Consumers finish the old shard up to the fences before
    they receive on the new one.  A move left half done is finished by --resume (alone, or
    before a new move).

    JSON: [{"move_id", "map_version", "slot_lo", "slot_hi", "from_shard", "to_shard", "fences"}]
    """
    if slots is None and to_shard is None and not resume:
        raise click.UsageError("give --slots and --to (or --resume)")
    if (slots is None) != (to_shard is None):
        raise click.UsageError("give both --slots and --to")
    lo, hi = slots if slots else (None, None)
    moves = cluster_admin.move_slots(app.dsn, lo, hi, to_shard, resume=resume, lock_timeout=lock_timeout)
    if app.json:
        emit_json(moves)
        return
    if not moves:
        click.echo("nothing to move" + (" or resume" if resume else "") + " (the slots are there already)")
        return
    click.echo(f"{len(moves)} move(s) done")
    _print_moves(moves)


@cluster.command("add-shard")
@click.option("--new-dsn", required=True, metavar="DSN", help="The database that joins as a new shard.")
@click.option("--name", metavar="NAME", help="Its name in the map (default: the first free shardN).")
@click.option("--rebalance", is_flag=True, help="Then move it an even share of the slots.")
@common_options
@json_option
@pass_app
def add_shard(app: App, new_dsn: str, name: str | None, rebalance: bool) -> None:
    """Join the database of --new-dsn to the cluster of --dsn, with no slots (or an even share with
    --rebalance).

    A database that is a shard of the map already (the same server system identifier and
    database oid, whatever the DSN) is refused, nothing changed.

    JSON: {"map": the map, "moves": [moves made]}
    """
    check_dsn(new_dsn, "--new-dsn")
    got = cluster_admin.add_shard(app.dsn, new_dsn, name, rebalance=rebalance)
    if app.json:
        emit_json(got)
        return
    cmap = got["map"]
    click.echo(f"shard {cmap['self']!r} joined cluster {cmap['cluster']!r} (map version {cmap['version']})")
    _print_moves(got["moves"])
    _print_map(cmap)


@cluster.command("remove-shard")
@click.option("--name", required=True, metavar="NAME", help="The shard to remove.")
@click.option("--force", is_flag=True,
              help="Drop it from the map even while consumers still have to finish its events.")
@common_options
@json_option
@pass_app
def remove_shard(app: App, name: str, force: bool) -> None:
    """Move every slot of shard --name to the other shards, then drop it from the map.

    While consumers still have to finish its events up to the moves' fences, it stays in the map
    without slots (run the command again later, or --force: their gates are then passed, and the
    order of the moved keys is not kept for them).

    JSON: {"map": the map, "moves": [moves made], "removed": bool}
    """
    got = cluster_admin.remove_shard(app.dsn, name, force=force)
    if app.json:
        emit_json(got)
        return
    _print_moves(got["moves"])
    click.echo(f"shard {name!r} removed; map version {got['map']['version']}")
    _print_map(got["map"])
