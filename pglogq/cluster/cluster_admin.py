"""The orchestrator of a sharded cluster: one queue across several PostgreSQL servers.

Every shard stores the same shard map (``pglogq.cluster_map()``): 16,384 hash slots
(``pglogq.key_slot``) in ranges, each owned by one shard, under one version that grows by one per
change.  This module changes the map through the SQL API of every shard, synchronously (it is
what ``pglogq cluster ...`` runs):

- :func:`init` makes databases the shards of a new cluster (map version 1, slots spread evenly);
- :func:`status` reads every shard's map, version and unfinished moves;
- :func:`move_slots` moves a slot range to a shard, one move per current owner, each a new map
  version: ``cluster_import`` on the target, ``cluster_export`` then ``cluster_fence`` on the
  source, ``cluster_finish_move`` on the target and then on the source, and the new map applied
  on every other shard; a move left half done (a crash, a shard that went away) is finished by
  ``move_slots(..., resume=True)``, every step being idempotent;
- :func:`add_shard` joins a new database with the current map (and may move it an even share);
- :func:`remove_shard` moves a shard's slots away, then drops it from the map.

One operation runs at a time: each holds a session advisory lock on the cluster's first shard
(by name) and checks that every shard has the same map version and no unfinished move first.
The DSNs stored in the map carry no password: connections to the other shards take their
credentials (user, password, passfile, SSL files) from the seed DSN given here.
"""

from __future__ import annotations

import contextlib
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

import psycopg
from psycopg.conninfo import conninfo_to_dict, make_conninfo
from psycopg.types.json import Jsonb

from pglogq.cluster._sharding import unreachable
from pglogq.cluster.shardmap import shard_dsn  # the one merge of a shard's place and the seed's credentials
from pglogq.errors import GatesPending, InvalidShardMap, PglogqError, ShardUnavailable, translate
from pglogq.keys import SLOTS

SLOT_COUNT = SLOTS  # 16,384 hash slots (pglogq.keys)
DEFAULT_CLUSTER = "pglogq"
# never stored in the map
SECRET_KEYS = ("password", "passfile", "sslpassword")
_LOCK_SQL = "SELECT pg_try_advisory_lock(hashtext('pglogq.cluster.admin'))"
_UNLOCK_SQL = "SELECT pg_advisory_unlock(hashtext('pglogq.cluster.admin'))"


# -- DSNs ----------------------------------------------------------------------------------------


def public_dsn(dsn: str) -> str:
    """``dsn`` without its password (what the map stores: every shard and client reads it)."""
    try:
        parts = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError as exc:
        raise InvalidShardMap(f"cannot parse the DSN: {exc}") from exc
    return make_conninfo("", **{k: v for k, v in parts.items() if k not in SECRET_KEYS and v is not None})


def describe(dsn: str) -> str:
    """A DSN for messages: host, port and database, never a password."""
    try:
        d = conninfo_to_dict(dsn)
    except psycopg.ProgrammingError:
        return "(a DSN that cannot be parsed)"
    return f"{d.get('host') or 'localhost'}:{d.get('port') or 5432}/{d.get('dbname') or d.get('user') or ''}"


# -- talking to shards ---------------------------------------------------------------------------


def connect(dsn: str, name: str | None = None) -> psycopg.Connection[Any]:
    """An autocommit connection to a shard, or :class:`ShardUnavailable`."""
    try:
        return psycopg.connect(dsn, autocommit=True, connect_timeout=10, application_name="pglogq-cluster",
                               prepare_threshold=None)
    except psycopg.OperationalError as exc:
        why = " ".join(str(exc).split())
        who = f'shard "{name}" ({describe(dsn)})' if name else describe(dsn)
        raise ShardUnavailable(f"{who} did not answer: {why}") from exc


def call(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Any:
    """The first column of the first row of one SQL call; pglogq errors translated."""
    try:
        row = conn.execute(sql, params).fetchone()
    except psycopg.Error as exc:
        if unreachable(exc):  # the clients' rule: connection lost, server shut down, database closed
            raise ShardUnavailable(f"{describe(conn.info.dsn)} went away: {' '.join(str(exc).split())}") from exc
        err = translate(exc)
        if err is exc:
            raise
        raise err from exc
    return None if row is None else row[0]


def read_map(conn: psycopg.Connection[Any]) -> dict[str, Any]:
    """``pglogq.cluster_map()`` of one shard."""
    got = call(conn, "SELECT pglogq.cluster_map()")
    assert isinstance(got, dict)
    return got


# What makes two DSNs reach one database: the server's system identifier (pg_control_system(),
# chosen at initdb) and the database's oid on that server are equal, and a session opened
# through one is listed in pg_stat_activity of the other's database.  DSN strings cannot tell (a
# host name and its address, a port given or left out, a socket directory), nor can anything
# pglogq stores in a database (a database created from a template, or restored from a dump,
# carries the template's rows).  The session check is there for servers made from one copy of a
# data directory: their system identifiers and oids are equal, their sessions are not.
_IDENTITY_SQL = ("SELECT s.system_identifier::text, d.oid::bigint, d.datname::text"
                 " FROM pg_control_system() s, pg_database d WHERE d.datname = current_database()")
_SEEN_SQL = ("SELECT EXISTS (SELECT 1 FROM pg_stat_activity a JOIN pg_database d ON d.oid = a.datid"
             " WHERE d.datname = current_database() AND a.application_name = %s)")


def _execute(conn: psycopg.Connection[Any], sql: str, params: Sequence[Any] = ()) -> Any:
    try:
        row = conn.execute(sql, params).fetchone()
    except psycopg.Error as exc:
        if unreachable(exc):
            raise ShardUnavailable(f"{describe(conn.info.dsn)} went away: {' '.join(str(exc).split())}") from exc
        raise
    assert row is not None
    return row


def database_identity(conn: psycopg.Connection[Any]) -> tuple[str, int, str]:
    """The database ``conn`` reaches, as (the server's system identifier, the database's oid, its
    name).  Two connections whose first two are equal reach one database when
    :func:`one_database` confirms it."""
    row = _execute(conn, _IDENTITY_SQL)
    return str(row[0]), int(row[1]), str(row[2])


def one_database(first: psycopg.Connection[Any], second: psycopg.Connection[Any]) -> bool:
    """Whether the session of ``first`` is one of the database of ``second`` (one server, one
    database): ``first`` takes a unique application_name, which ``second`` looks for."""
    token = f"pglogq-cluster-{uuid.uuid4().hex}"
    _execute(first, "SELECT set_config('application_name', %s, false)", (token,))
    try:
        return bool(_execute(second, _SEEN_SQL, (token,))[0])
    finally:
        with contextlib.suppress(psycopg.Error):
            first.execute("SELECT set_config('application_name', 'pglogq-cluster', false)")


def same_databases(conns: dict[str, psycopg.Connection[Any]]) -> list[tuple[list[str], tuple[str, int, str]]]:
    """Groups of two or more names (in the order given) whose connections reach one database,
    each with that database's identity (:func:`database_identity`, :func:`one_database`)."""
    identities = {name: database_identity(conn) for name, conn in conns.items()}
    groups: list[list[str]] = []
    for name in conns:
        for group in groups:
            if identities[group[0]][:2] == identities[name][:2] and one_database(conns[name], conns[group[0]]):
                group.append(name)
                break
        else:
            groups.append([name])
    return [(group, identities[group[0]]) for group in groups if len(group) > 1]


def _same_database_message(names: Sequence[str], ident: tuple[str, int, str]) -> str:
    quoted = ", ".join(f'"{n}"' for n in names)
    return (f"shards {quoted} are one database ({ident[2]!r}, oid {ident[1]}, of the server with system"
            f" identifier {ident[0]})")


def even_ranges(names: Sequence[str]) -> list[dict[str, Any]]:
    """Slots 0..16383 in len(names) contiguous ranges of (nearly) equal size, in that order."""
    n = len(names)
    return [{"lo": i * SLOT_COUNT // n, "hi": (i + 1) * SLOT_COUNT // n - 1, "shard": name}
            for i, name in enumerate(names)]


def slot_counts(cmap: dict[str, Any]) -> dict[str, int]:
    """Shard name → how many slots it owns (0 for a shard without ranges)."""
    counts = {s["name"]: 0 for s in cmap["shards"]}
    for r in cmap["ranges"]:
        counts[r["shard"]] += r["hi"] - r["lo"] + 1
    return counts


class _Cluster:
    """Connections to the shards of one map, opened on demand, closed together."""

    def __init__(self, seed: str) -> None:
        self.seed = seed
        self.conns: dict[str, psycopg.Connection[Any]] = {}
        seed_conn = connect(seed)
        try:
            self.map = read_map(seed_conn)
        except BaseException:
            seed_conn.close()
            raise
        self.conns[self.map["self"]] = seed_conn
        self.lock_conn: psycopg.Connection[Any] | None = None

    def dsn_of(self, name: str) -> str:
        for s in self.map["shards"]:
            if s["name"] == name:
                return shard_dsn(str(s["dsn"]), self.seed)
        raise InvalidShardMap(f'no shard "{name}" in map version {self.map["version"]}'
                              f' (shards: {", ".join(s["name"] for s in self.map["shards"])})')

    def conn(self, name: str) -> psycopg.Connection[Any]:
        if name not in self.conns or self.conns[name].closed:
            self.conns[name] = connect(self.dsn_of(name), name)
        return self.conns[name]

    def maps(self) -> dict[str, dict[str, Any]]:
        """Every shard's map (all must answer)."""
        return {s["name"]: read_map(self.conn(s["name"])) for s in self.map["shards"]}

    def lock(self) -> None:
        """The cluster's operation lock, on its first shard by name."""
        first = min(s["name"] for s in self.map["shards"])
        conn = self.conn(first)
        if not call(conn, _LOCK_SQL):
            raise ShardUnavailable(
                f'another cluster operation is running (it holds the lock on shard "{first}")',
                hint="wait for it to end; a crashed one releases the lock with its connection")
        self.lock_conn = conn

    def close(self) -> None:
        if self.lock_conn is not None and not self.lock_conn.closed:
            with contextlib.suppress(psycopg.Error):
                self.lock_conn.execute(_UNLOCK_SQL)
        for c in self.conns.values():
            c.close()


@contextlib.contextmanager
def _cluster(seed: str, *, lock: bool = True) -> Iterator[_Cluster]:
    cl = _Cluster(seed)
    try:
        if lock:
            cl.lock()
        yield cl
    finally:
        cl.close()


def _latest(cl: _Cluster) -> tuple[dict[str, dict[str, Any]], list[dict[str, Any]]]:
    """Every shard's map (the highest version becomes ``cl.map``) and the unfinished moves."""
    maps = cl.maps()
    best = max(maps.values(), key=lambda m: int(m["version"]))
    if int(best["version"]) > int(cl.map["version"]):
        cl.map = best
        maps = cl.maps()  # a shard the seed's map did not list yet
        best = max(maps.values(), key=lambda m: int(m["version"]))
    cl.map = best
    unfinished: dict[int, dict[str, Any]] = {}
    for m in maps.values():
        for mv in m["moves"]:
            if mv["state"] != "done":
                unfinished.setdefault(int(mv["move_id"]), mv)
    return maps, [unfinished[k] for k in sorted(unfinished)]


def _in_step(cl: _Cluster) -> dict[str, Any]:
    """The current map, after bringing every lagging shard up to it; refused while a move is
    unfinished (``resume`` finishes it)."""
    maps, unfinished = _latest(cl)
    if unfinished:
        ids = ", ".join(str(mv["move_id"]) for mv in unfinished)
        raise InvalidShardMap(f"move {ids} is unfinished",
                              hint="pglogq cluster move-slots --resume finishes it")
    for name, m in maps.items():
        if int(m["version"]) < int(cl.map["version"]) and any(s["name"] == name for s in cl.map["shards"]):
            call(cl.conn(name), "SELECT pglogq.cluster_apply(%s)", (Jsonb(_bare(cl.map)),))
    return cl.map


def _bare(cmap: dict[str, Any]) -> dict[str, Any]:
    return {"cluster": cmap["cluster"], "version": cmap["version"], "slot_count": SLOT_COUNT,
            "shards": cmap["shards"], "ranges": cmap["ranges"]}


# -- the operations ------------------------------------------------------------------------------


def init(dsns: Sequence[str], names: Sequence[str] | None = None, *,
         cluster_name: str = DEFAULT_CLUSTER) -> dict[str, Any]:
    """Make the databases of ``dsns`` the shards of a new cluster: map version 1, the slots in
    contiguous ranges of nearly equal size, in the order given.  ``names`` default to
    ``shard0``, ``shard1``, ...  Running it again with the same arguments changes nothing (a run
    cut short is finished that way).  Two DSNs that reach one database (see
    :func:`database_identity`) are refused with :class:`InvalidShardMap` before anything is
    stored.  Returns the map."""
    if not dsns:
        raise InvalidShardMap("a cluster needs at least one shard")
    names = list(names) if names else [f"shard{i}" for i in range(len(dsns))]
    if len(names) != len(dsns):
        raise InvalidShardMap(f"{len(dsns)} DSNs and {len(names)} names: give one name per DSN")
    if len(set(names)) != len(names):
        raise InvalidShardMap("shard names must differ")
    cmap = {"cluster": cluster_name, "version": 1, "slot_count": SLOT_COUNT,
            "shards": [{"name": n, "dsn": public_dsn(d)} for n, d in zip(names, dsns, strict=True)],
            "ranges": even_ranges(names)}
    conns = []
    try:
        for name, dsn in zip(names, dsns, strict=True):
            conns.append((name, connect(dsn, name)))
        # before anything is stored: a database given twice (two DSNs of it, or one twice) would
        # be stored as two shards of the map, and no later command could repair that map
        twice = same_databases(dict(conns))
        if twice:
            group, ident = twice[0]
            raise InvalidShardMap(_same_database_message(group, ident) + ": each shard needs its own database;"
                                  " nothing was stored", hint="give each database once")
        joined: list[str] = []
        for name, conn in conns:
            try:
                call(conn, "SELECT pglogq.cluster_join(%s, %s, %s)", (cluster_name, name, Jsonb(cmap)))
            except ShardUnavailable as exc:
                raise ShardUnavailable(f"{exc.message}; joined so far: {', '.join(joined) or 'none'}",
                                       hint="run the same init again to finish") from exc
            joined.append(name)
        return read_map(conns[0][1])
    finally:
        for _, conn in conns:
            conn.close()


def status(seed: str) -> dict[str, Any]:
    """The cluster as every shard sees it: ``{"cluster", "version" (the highest), "consistent"
    (every shard answered with that version, no move is unfinished and there is no problem),
    "problems" (a broken map: shards whose DSNs reach one database, see
    :func:`database_identity`, or a shard's DSN reaching the database of another shard),
    "shards": [{"name", "dsn", "version", "reachable", "slots", "ranges", "error"}],
    "moves": [unfinished moves]}``."""
    with _cluster(seed, lock=False) as cl:
        shards: list[dict[str, Any]] = []
        maps: dict[str, dict[str, Any]] = {}
        problems: list[str] = []
        for s in cl.map["shards"]:
            entry: dict[str, Any] = {"name": s["name"], "dsn": s["dsn"], "version": None, "reachable": False,
                                     "slots": 0, "ranges": [], "error": None}
            try:
                conn = cl.conn(s["name"])
                m = read_map(conn)
            except PglogqError as exc:
                entry["error"] = str(exc)
            else:
                maps[s["name"]] = m
                entry.update(version=m["version"], reachable=True)
                if m["self"] != s["name"]:
                    problems.append(f'the DSN of shard "{s["name"]}" reaches the database of shard "{m["self"]}"')
            shards.append(entry)
        try:
            twice = same_databases({name: cl.conn(name) for name in maps})
        except (PglogqError, psycopg.Error):  # a shard gone meanwhile: the report is still made
            twice = []
        for group, ident in reversed(twice):
            problems.insert(0, _same_database_message(group, ident)
                            + ": the keys of their slots cannot be sent (each shard needs its own database)")
        best = max(maps.values(), key=lambda m: int(m["version"])) if maps else cl.map
        counts = slot_counts(best)
        for entry in shards:
            entry["slots"] = counts.get(entry["name"], 0)
            entry["ranges"] = [[r["lo"], r["hi"]] for r in best["ranges"] if r["shard"] == entry["name"]]
        moves: dict[int, dict[str, Any]] = {}
        for name, m in maps.items():
            for mv in m["moves"]:
                if mv["state"] != "done" or mv["gates"]:
                    got = moves.setdefault(int(mv["move_id"]), {
                        k: mv[k] for k in ("move_id", "map_version", "slot_lo", "slot_hi", "from_shard", "to_shard")}
                        | {"states": {}, "fences": None, "gates": 0})
                    got["states"][name] = mv["state"]
                    got["fences"] = got["fences"] or mv["fences"]
                    got["gates"] += mv["gates"]
        unfinished = [mv for mv in moves.values() if any(st != "done" for st in mv["states"].values())]
        gated = [mv for mv in moves.values() if mv not in unfinished]
        consistent = (len(maps) == len(shards) and not unfinished and not problems
                      and all(int(m["version"]) == int(best["version"]) for m in maps.values()))
        return {"cluster": best["cluster"], "version": best["version"], "consistent": consistent,
                "problems": problems, "shards": shards, "moves": sorted(unfinished, key=lambda mv: mv["move_id"]),
                "gated_moves": sorted(gated, key=lambda mv: mv["move_id"])}


def _plan(cmap: dict[str, Any], lo: int, hi: int, to_shard: str) -> list[tuple[int, int, str]]:
    """(lo, hi, owner) of each part of lo..hi that is not ``to_shard``'s yet."""
    parts = []
    for r in cmap["ranges"]:
        a, b = max(lo, r["lo"]), min(hi, r["hi"])
        if a <= b and r["shard"] != to_shard:
            parts.append((a, b, str(r["shard"])))
    return parts


def _export(conn: psycopg.Connection[Any], move: dict[str, Any], lock_timeout: float, attempts: int = 3) -> None:
    """``cluster_export`` on the source.  It waits for every transaction sending to a sharded
    queue there, and new sends wait behind it: each attempt waits at most ``lock_timeout``
    seconds (a transaction left open would otherwise hold every send of its queue), and a
    deadlock with a transaction that sent to two queues is tried again."""
    for attempt in range(attempts):
        try:
            with conn.transaction():
                conn.execute("SELECT set_config('lock_timeout', %s, true)", (f"{int(lock_timeout * 1000)}ms",))
                call(conn, "SELECT pglogq.cluster_export(%s)", (Jsonb(move),))
            return
        except (psycopg.errors.DeadlockDetected, psycopg.errors.LockNotAvailable) as exc:
            if attempt == attempts - 1:
                # sessions idle in a transaction that holds a shared advisory lock (a send's)
                holders = conn.execute(
                    "SELECT string_agg(DISTINCT l.pid::text, ', ') FROM pg_locks l JOIN pg_stat_activity a"
                    " ON a.pid = l.pid WHERE l.locktype = 'advisory' AND l.mode = 'ShareLock' AND l.granted"
                    " AND a.datname = current_database() AND a.state LIKE 'idle in transaction%'"
                    " AND l.pid <> pg_backend_pid()").fetchone()
                raise ShardUnavailable(
                    f"move {move['move_id']}: shard \"{move['from_shard']}\" could not export, transactions sending"
                    f" to its queues stayed open ({type(exc).__name__}; sessions idle in a transaction that sent: "
                    f"{(holders or [None])[0] or 'unknown'})",
                    hint="the slots are imported on the target but still the source's: end those transactions,"
                         " then pglogq cluster move-slots --resume") from exc
            time.sleep(0.2 * (attempt + 1))


def _no_gates_on(cl: _Cluster, source: str) -> None:
    """Refuse a move out of ``source`` while consumers are gated there by an earlier move into it
    (GatesPending, nothing changed).  A move's gate waits for its consumers to finish the source
    up to the fence; a source whose consumers wait themselves could close a cycle of gates (slots
    moved back before the consumers passed): with this rule every new gate waits on a shard that
    waits for nothing, so the gates form no cycle and the oldest always passes."""
    waiting = [mv for mv in read_map(cl.conn(source))["moves"]
               if mv["to_shard"] == source and int(mv.get("gates") or 0) > 0]
    if waiting:
        which = ", ".join(f'move {mv["move_id"]} from "{mv["from_shard"]}" ({mv["gates"]} gated)' for mv in waiting)
        raise GatesPending(
            f'consumers are still gated on shard "{source}" by {which}: a move out of it waits until '
            "they have passed (pglogq cluster status lists the gates; a consumer that is gone for good "
            "can be unsubscribed)")


def _run_move(cl: _Cluster, mv: dict[str, Any], lock_timeout: float = 10.0) -> dict[str, Any]:
    """Every step of one move, each idempotent (a resume runs them all again)."""
    move = {k: mv[k] for k in ("move_id", "map_version", "slot_lo", "slot_hi", "from_shard", "to_shard")}
    target, source = cl.conn(move["to_shard"]), cl.conn(move["from_shard"])
    call(target, "SELECT pglogq.cluster_import(%s)", (Jsonb(move),))
    _export(source, move, lock_timeout)
    fences = call(source, "SELECT pglogq.cluster_fence(%s)", (move["move_id"],))
    call(target, "SELECT pglogq.cluster_finish_move(%s, %s)", (move["move_id"], Jsonb(fences)))
    call(source, "SELECT pglogq.cluster_finish_move(%s, %s)", (move["move_id"], Jsonb(fences)))
    cl.map = read_map(target)
    failed = []
    for s in cl.map["shards"]:
        if s["name"] in (move["from_shard"], move["to_shard"]):
            continue
        try:
            call(cl.conn(s["name"]), "SELECT pglogq.cluster_apply(%s)", (Jsonb(_bare(cl.map)),))
        except ShardUnavailable as exc:
            failed.append(exc.message)
    if failed:
        raise ShardUnavailable(f"move {move['move_id']} is done, but map version {cl.map['version']} could not"
                               f" be applied everywhere: {'; '.join(failed)}",
                               hint="the next cluster command brings those shards up to date")
    return move | {"fences": fences}


def move_slots(seed: str, lo: int | None = None, hi: int | None = None, to_shard: str | None = None, *,
               resume: bool = False, lock_timeout: float = 10.0) -> list[dict[str, Any]]:
    """Move slots ``lo``..``hi`` to shard ``to_shard``: one move per current owner of a part of
    the range (a part that is ``to_shard``'s already stays), each its own map version.  With
    ``resume``, first finish the unfinished moves (a crash half way); the range may then be left
    out.  ``lock_timeout``: how long (seconds) an export waits for the transactions sending to
    its shard's queues, per attempt (three attempts), before :class:`ShardUnavailable` leaves
    the move to ``resume``.  A move out of a shard where consumers are still gated by an earlier
    move into it is refused first (:class:`GatesPending`, nothing changed: see ``_no_gates_on``).
    Returns the moves made or finished, each with its fences ({queue: tick on the source})."""
    with _cluster(seed) as cl:
        done: list[dict[str, Any]] = []
        if resume:
            _, unfinished = _latest(cl)
            for mv in unfinished:
                done.append(_run_move(cl, mv, lock_timeout))
        if lo is None and hi is None and to_shard is None:
            if not resume:
                raise InvalidShardMap("give the slots and the target shard (or resume)")
            _in_step(cl)
            return done
        if lo is None or hi is None or to_shard is None:
            raise InvalidShardMap("give both ends of the slot range and the target shard")
        if not (0 <= lo <= hi < SLOT_COUNT):
            raise InvalidShardMap(f"slots {lo}-{hi} are not within 0..{SLOT_COUNT - 1} (lo <= hi)")
        cmap = _in_step(cl)
        cl.dsn_of(to_shard)  # an unknown target: InvalidShardMap naming the shards
        plan = _plan(cmap, lo, hi, to_shard)
        for owner in sorted({owner for _, _, owner in plan}):
            _no_gates_on(cl, owner)
        for a, b, owner in plan:
            v = int(cl.map["version"]) + 1
            done.append(_run_move(cl, {"move_id": v, "map_version": v, "slot_lo": a, "slot_hi": b,
                                       "from_shard": owner, "to_shard": to_shard}, lock_timeout))
        return done


def add_shard(seed: str, dsn: str, name: str | None = None, *, rebalance: bool = False) -> dict[str, Any]:
    """Join the database of ``dsn`` to the cluster as shard ``name`` (default: the first free
    ``shardN``), with no slots, after creating there the queues and consumers of the seed's
    shard that it lacks (:func:`copy_queues`); with ``rebalance``, then move it an even share (taken from the
    shards with the most slots, in contiguous ranges).  Returns ``{"map": the map, "moves":
    [moves made]}``.  A database that is a shard of the map already (under another name; see
    :func:`database_identity`) is refused with :class:`InvalidShardMap`, nothing changed."""
    with _cluster(seed) as cl:
        cmap = _in_step(cl)
        taken = {s["name"] for s in cmap["shards"]}
        if name is None:
            name = next(f"shard{i}" for i in range(len(taken) + 1) if f"shard{i}" not in taken)
        new_dsn = public_dsn(dsn)
        if name in taken:
            listed = next(s for s in cmap["shards"] if s["name"] == name)
            if listed["dsn"] != new_dsn:
                raise InvalidShardMap(f'shard "{name}" exists already, with another DSN')
            new_map = cmap
        else:
            new_map = _bare(cmap) | {"version": int(cmap["version"]) + 1,
                                     "shards": [*cmap["shards"], {"name": name, "dsn": new_dsn}]}
        with contextlib.closing(connect(dsn, name)) as conn:
            # before anything is copied or stored: a database of the map joined again under
            # another name would be two shards of the map
            mine = database_identity(conn)
            for s in cmap["shards"]:
                other = cl.conn(s["name"])
                if (s["name"] != name and database_identity(other)[:2] == mine[:2]
                        and one_database(conn, other)):
                    raise InvalidShardMap(
                        f'the database of {describe(dsn)} is shard "{s["name"]}" of the cluster already'
                        f" ({mine[2]!r}, oid {mine[1]}, of the server with system identifier {mine[0]});"
                        " nothing was changed", hint="add-shard takes a database that is not in the map")
            copy_queues(cl.conn(cmap["self"]), conn)
            call(conn, "SELECT pglogq.cluster_join(%s, %s, %s)", (cmap["cluster"], name, Jsonb(new_map)))
        for s in cmap["shards"]:
            call(cl.conn(s["name"]), "SELECT pglogq.cluster_apply(%s)", (Jsonb(_bare(new_map)),))
        cl.map = read_map(cl.conn(cmap["shards"][0]["name"]))  # lists the new shard now
        cl.map = read_map(cl.conn(name))
        moves: list[dict[str, Any]] = []
        if rebalance:
            plan = _rebalance_plan(cl.map, name)
            for owner in sorted({owner for _, _, owner in plan}):
                _no_gates_on(cl, owner)  # the shard is added; its share is moved once they passed
            for a, b, owner in plan:
                v = int(cl.map["version"]) + 1
                moves.append(_run_move(cl, {"move_id": v, "map_version": v, "slot_lo": a, "slot_hi": b,
                                            "from_shard": owner, "to_shard": name}))
        return {"map": cl.map, "moves": moves}


def copy_queues(src: psycopg.Connection[Any], dst: psycopg.Connection[Any]) -> list[str]:
    """Create on ``dst`` every queue of ``src`` that it lacks, with the same layout (partitions,
    urgent lane) and settings, and subscribe every consumer of ``src`` there: a new shard is
    ready for the keys moved to it, and its consumers are gated by the moves from the start.
    Returns the queues created."""
    made = []
    queues = src.execute("SELECT i.queue_name, l.partitions, l.urgent_lane FROM pglogq.queue_info(NULL) i,"
                         " pglogq.queue_layout(i.queue_name) l ORDER BY i.queue_name").fetchall()
    for queue, partitions, urgent in queues:
        if call(dst, "SELECT pglogq.create_queue(%s)", (queue,)):
            made.append(queue)
            if partitions > 1:
                call(dst, "SELECT pglogq.set_queue_config(%s, 'partitions', %s)", (queue, str(partitions)))
            if urgent:
                call(dst, "SELECT pglogq.set_queue_config(%s, 'urgent_lane', 'true')", (queue,))
            settings = src.execute("SELECT e.key, e.value FROM pglogq.queue_config(%s) c,"
                                   " jsonb_each_text(to_jsonb(c)) e", (queue,)).fetchall()
            for param, value in settings:
                call(dst, "SELECT pglogq.set_queue_config(%s, %s, %s)", (queue, param, value))
        consumers = src.execute("SELECT DISTINCT c.consumer_name FROM pglogq.consumer_info(%s) c ORDER BY 1",
                                (queue,)).fetchall()
        for (consumer,) in consumers:
            call(dst, "SELECT pglogq.subscribe(%s, %s)", (queue, consumer))
    return made


def _rebalance_plan(cmap: dict[str, Any], new: str) -> list[tuple[int, int, str]]:
    """Contiguous pieces to move to shard ``new`` so that it gets an even share: from each shard
    its slots above the share, taken from the top of its ranges."""
    counts = slot_counts(cmap)
    share = SLOT_COUNT // len(counts)
    want = share - counts[new]
    plan: list[tuple[int, int, str]] = []
    for owner in sorted(counts, key=lambda s: (-counts[s], s)):
        if want <= 0:
            break
        if owner == new:
            continue
        spare = min(counts[owner] - share, want)
        for r in sorted((r for r in cmap["ranges"] if r["shard"] == owner), key=lambda r: -int(r["hi"])):
            if spare <= 0:
                break
            k = min(spare, r["hi"] - r["lo"] + 1)
            plan.append((r["hi"] - k + 1, r["hi"], owner))
            spare -= k
            want -= k
    return plan


def remove_shard(seed: str, name: str, *, force: bool = False) -> dict[str, Any]:
    """Move every slot of shard ``name`` to the other shards (evenly, in contiguous pieces), then
    drop it from the map and end its membership (``cluster_leave``).  While consumers are still
    gated on another shard by a move from it (they have not finished its events up to the
    move's fence: its DSN stays in the map so that they can), the shard stays listed without
    slots and :class:`ShardUnavailable` says so: run it again later, or ``force`` to drop it
    anyway (their gates are passed: the order of the moved keys is then not kept for them).
    Returns ``{"map": the map, "moves": [moves made], "removed": bool}``."""
    if not isinstance(name, str) or not name:
        raise InvalidShardMap("name the shard to remove")
    with _cluster(seed) as cl:
        cmap = _in_step(cl)
        cl.dsn_of(name)
        others = sorted(s["name"] for s in cmap["shards"] if s["name"] != name)
        if not others:
            raise InvalidShardMap(f'shard "{name}" is the only shard: a cluster keeps one')
        moves: list[dict[str, Any]] = []
        if not force:
            _no_gates_on(cl, name)
        for a, b, to in _spread_plan(cmap, name, others):
            v = int(cl.map["version"]) + 1
            moves.append(_run_move(cl, {"move_id": v, "map_version": v, "slot_lo": a, "slot_hi": b,
                                        "from_shard": name, "to_shard": to}))
        gated = 0
        for other in others:
            m = read_map(cl.conn(other))
            gated += sum(int(mv["gates"]) for mv in m["moves"] if mv["from_shard"] == name)
        if gated and not force:
            raise ShardUnavailable(
                f'shard "{name}" has no slots left, but {gated} consumer gate(s) still wait for consumers to '
                f"finish its events; it stays in the map until then",
                hint="run remove-shard again later (or with --force to drop it now)")
        if gated:  # forced: nobody could finish a shard that is gone, so nobody waits for it
            for other in others:
                _pass_gates(cl.conn(other), name)
        final = _bare(cl.map) | {"version": int(cl.map["version"]) + 1,
                                 "shards": [s for s in cl.map["shards"] if s["name"] != name]}
        removed_conn = cl.conn(name)
        for other in others:
            call(cl.conn(other), "SELECT pglogq.cluster_apply(%s)", (Jsonb(final),))
        call(removed_conn, "SELECT pglogq.cluster_leave()")
        cl.map = read_map(cl.conn(others[0]))
        return {"map": cl.map, "moves": moves, "removed": True}


def _pass_gates(conn: psycopg.Connection[Any], from_shard: str) -> int:
    """Pass every consumer's gate of the moves from ``from_shard`` on the shard of ``conn``."""
    moves = [int(mv["move_id"]) for mv in read_map(conn)["moves"] if mv["from_shard"] == from_shard and mv["gates"]]
    passed = 0
    if moves:
        pairs = conn.execute("SELECT DISTINCT c.queue_name, c.consumer_name FROM pglogq.consumer_info() c"
                             " ORDER BY 1, 2").fetchall()
        for move_id in moves:
            for queue, consumer in pairs:
                passed += bool(call(conn, "SELECT pglogq.cluster_gate_pass(%s, %s, %s)", (queue, consumer, move_id)))
    return passed


def _spread_plan(cmap: dict[str, Any], name: str, others: list[str]) -> list[tuple[int, int, str]]:
    """Pieces of shard ``name``'s ranges for each of ``others``, nearly equal in size."""
    slots = [(r["lo"], r["hi"]) for r in sorted(cmap["ranges"], key=lambda r: int(r["lo"])) if r["shard"] == name]
    total = sum(b - a + 1 for a, b in slots)
    if not total:
        return []
    quotas = [total // len(others) + (1 if i < total % len(others) else 0) for i in range(len(others))]
    plan: list[tuple[int, int, str]] = []
    i = 0
    for a, b in slots:
        while a <= b:
            while quotas[i] == 0:
                i += 1
            k = min(quotas[i], b - a + 1)
            plan.append((a, a + k - 1, others[i]))
            quotas[i] -= k
            a += k
    return plan
