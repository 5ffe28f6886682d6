"""The shard map of a pglogq cluster: which shard owns which hash slot (no I/O here).

A cluster spreads one queue over several PostgreSQL servers (shards).  Every keyed event has a
hash slot (:func:`pglogq.key_slot`, 0..16383); each slot belongs to exactly one shard under a
map version, and every shard stores the same map (SQL ``pglogq.cluster_map()``).  A
:class:`ShardMap` is that map read by a client: it answers "which shard holds this key" and
makes the DSN a client connects to a shard with.

The DSNs stored in the map carry no password (they name host, port, database, maybe a user):
:func:`shard_dsn` adds the credentials and connection options of the DSN the client was given
(its seed), so that a password never travels through the database.
"""

from __future__ import annotations

import bisect
import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any

from psycopg.conninfo import conninfo_to_dict, make_conninfo

from pglogq.errors import InvalidShardMap
from pglogq.keys import SLOTS, key_slot

LOCATION_KEYS = frozenset({"host", "hostaddr", "port", "dbname", "service"})
"""The connection parameters that say *where* a shard is: taken from the map's DSN, never from
the seed (every other parameter of the seed, such as ``password``, ``sslmode`` or
``connect_timeout``, applies to every shard unless the map's DSN sets it)."""


@dataclass(frozen=True)
class ShardRange:
    """The slots ``lo..hi`` (both included) belong to ``shard``."""

    lo: int
    hi: int
    shard: str


@dataclass(frozen=True)
class ShardMove:
    """An unfinished move of the slots ``lo..hi`` from ``from_shard`` to ``to_shard``.

    ``version`` is the map version the move makes; ``state`` 'importing' (the target owns the
    slots, the source still takes sends until its export), 'exported' (the source gave them away;
    ``fences`` holds, per queue, the tick id on the source at or before which every event of the
    moved slots lies) or 'done'."""

    move_id: int
    version: int
    lo: int
    hi: int
    from_shard: str
    to_shard: str
    state: str
    fences: Mapping[str, int] = field(default_factory=dict)


@dataclass(frozen=True)
class ShardMap:
    """One version of a cluster's shard map, as ``pglogq.cluster_map()`` returns it.

    ``shards`` maps each shard's name to its DSN as stored (without password: see :meth:`dsn`);
    ``ranges`` cover the slots 0..``slot_count - 1`` exactly once, sorted; ``moves`` are the
    unfinished moves the shard the map was read from knows of; ``source`` names that shard."""

    cluster: str
    version: int
    shards: Mapping[str, str]
    ranges: tuple[ShardRange, ...]
    moves: tuple[ShardMove, ...] = ()
    source: str | None = None
    slot_count: int = SLOTS
    _starts: tuple[int, ...] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        _check(self)
        object.__setattr__(self, "shards", MappingProxyType(dict(self.shards)))
        object.__setattr__(self, "_starts", tuple(r.lo for r in self.ranges))

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | str | bytes) -> ShardMap:
        """Parse the jsonb of ``pglogq.cluster_map()`` (a dict, or its JSON text).

        Raises :class:`~pglogq.errors.InvalidShardMap` when it is not a valid map: missing or
        mistyped fields, ranges that do not cover every slot exactly once, a range naming a shard
        that is not listed."""
        try:
            doc = json.loads(data) if isinstance(data, (str, bytes)) else data
            if not isinstance(doc, Mapping):
                raise TypeError(f"a JSON object is expected, got {type(doc).__name__}")
            shards = {str(s["name"]): str(s["dsn"]) for s in doc["shards"]}
            ranges = tuple(sorted(
                (ShardRange(_int(r["lo"]), _int(r["hi"]), str(r["shard"])) for r in doc["ranges"]),
                key=lambda r: r.lo,
            ))
            moves = tuple(_move(m) for m in doc.get("moves") or ())
            source = doc.get("self")
            return cls(
                cluster=str(doc["cluster"]), version=_int(doc["version"]), shards=shards, ranges=ranges,
                moves=moves, source=None if source is None else str(source),
                slot_count=_int(doc.get("slot_count", SLOTS)),
            )
        except InvalidShardMap:
            raise
        except (KeyError, TypeError, ValueError) as exc:
            what = f"missing field {exc}" if isinstance(exc, KeyError) else str(exc)
            raise InvalidShardMap(f"invalid shard map: {what}") from None

    # -- lookups ----------------------------------------------------------------------------------

    @property
    def shard_names(self) -> tuple[str, ...]:
        """The shards of this map, in the order the map lists them."""
        return tuple(self.shards)

    def shard_for_slot(self, slot: int) -> str:
        """The shard that owns hash slot ``slot`` (0..slot_count - 1, else ValueError)."""
        if isinstance(slot, bool) or not isinstance(slot, int) or not 0 <= slot < self.slot_count:
            raise ValueError(f"slot {slot!r} is out of 0..{self.slot_count - 1}")
        return self.ranges[bisect.bisect_right(self._starts, slot) - 1].shard

    def shard_for_key(self, key: str) -> str:
        """The shard that owns the slot of event key ``key`` (:func:`pglogq.key_slot`)."""
        return self.shard_for_slot(key_slot(key))

    def slots_of(self, shard: str) -> list[tuple[int, int]]:
        """The slot ranges ``(lo, hi)`` ``shard`` owns (empty for a shard without slots)."""
        return [(r.lo, r.hi) for r in self.ranges if r.shard == shard]

    def moves_into(self, shard: str) -> list[ShardMove]:
        """The unfinished moves whose target is ``shard``."""
        return [m for m in self.moves if m.to_shard == shard]

    def moves_from(self, shard: str) -> list[ShardMove]:
        """The unfinished moves whose source is ``shard``."""
        return [m for m in self.moves if m.from_shard == shard]

    def move(self, move_id: int) -> ShardMove | None:
        """The unfinished move ``move_id`` (None when this map knows no such unfinished move)."""
        return next((m for m in self.moves if m.move_id == move_id), None)

    def dsn(self, shard: str, seed: str | None = None) -> str:
        """The DSN to connect to ``shard``: the map's DSN with the credentials and options of
        ``seed`` (see :func:`shard_dsn`; None: the map's DSN as stored).  KeyError for a shard
        that is not in the map."""
        stored = self.shards[shard]
        return stored if seed is None else shard_dsn(stored, seed)


def shard_dsn(stored: str, seed: str) -> str:
    """The DSN of a shard: where it is (host, hostaddr, port, dbname, service) from ``stored``,
    the map's DSN; every other connection parameter (user, password, passfile, sslmode and the
    other ssl options, connect_timeout, application_name, options, ...) from ``stored`` when it
    sets it, else from ``seed``, the DSN the client was given.

    So the password never needs to be in the map, and a client that connects with TLS or a
    connect timeout does so to every shard.  Both may be URLs or key=value strings; the result is
    a key=value string."""
    where = conninfo_to_dict(stored)
    merged = {k: val for k, val in conninfo_to_dict(seed).items() if k not in LOCATION_KEYS}
    merged.update(where)
    return make_conninfo("", **merged)


def redacted(dsn: str) -> str:
    """``dsn`` without its password (for messages and logs)."""
    try:
        params = conninfo_to_dict(dsn)
    except Exception:  # not a DSN psycopg parses: say nothing of it
        return "<unparsable DSN>"
    params.pop("password", None)
    return make_conninfo("", **params)


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, str)):
        raise TypeError(f"an integer is expected, got {value!r}")
    return int(value)


def _move(m: Mapping[str, Any]) -> ShardMove:
    fences = m.get("fences") or {}
    if not isinstance(fences, Mapping):
        raise TypeError(f"the fences of move {m.get('move_id')} are not a JSON object")
    return ShardMove(
        move_id=_int(m["move_id"]),
        version=_int(m.get("map_version", m.get("version"))),
        lo=_int(m.get("slot_lo", m.get("lo"))),
        hi=_int(m.get("slot_hi", m.get("hi"))),
        from_shard=str(m["from_shard"]),
        to_shard=str(m["to_shard"]),
        state=str(m.get("state", "importing")),
        fences=MappingProxyType({str(q): _int(t) for q, t in fences.items()}),
    )


def _check(m: ShardMap) -> None:
    """Raise InvalidShardMap unless the ranges, sorted, cover 0..slot_count - 1 exactly once and
    every range's shard is listed (a move may name a shard that has left the map since)."""
    if m.slot_count < 1:
        raise InvalidShardMap(f"invalid shard map: slot_count {m.slot_count}")
    if not m.shards:
        raise InvalidShardMap("invalid shard map: no shard")
    expect = 0
    for r in m.ranges:
        if r.lo != expect or r.hi < r.lo:
            gap = "overlap" if r.lo < expect else "gap"
            raise InvalidShardMap(f"invalid shard map: slot range {r.lo}-{r.hi} ({gap} at slot {expect})")
        if r.shard not in m.shards:
            raise InvalidShardMap(f"invalid shard map: range {r.lo}-{r.hi} names unknown shard {r.shard!r}")
        expect = r.hi + 1
    if expect != m.slot_count:
        raise InvalidShardMap(f"invalid shard map: slots {expect}..{m.slot_count - 1} belong to no shard")
