"""pglogq: an append-only log queue on PostgreSQL.

Producers append events; a ticker records snapshots; each consumer reads the batch between two
ticks with its own cursor, so fan-out shares one copy; old tables are emptied by TRUNCATE.
"""

from pglogq._runtime import RunStats
from pglogq.client import Batch, Client
from pglogq.client_async import AsyncBatch, AsyncClient
from pglogq.consumer import Consumer, Delivery
from pglogq.consumer_async import AsyncConsumer, AsyncDelivery
from pglogq.errors import (
    AlreadyExists,
    BatchLost,
    BatchOpen,
    CancelConflict,
    ClientClosed,
    DependentObjects,
    InstallNotPermitted,
    InvalidArgument,
    InvalidConfig,
    InvalidDelay,
    InvalidInput,
    InvalidName,
    InvalidPayload,
    InvalidProgress,
    MessageNotInBatch,
    NotFound,
    PayloadTooLarge,
    PglogqError,
    QueueInUse,
    SchemaMismatch,
    SchemaTooNew,
    SeekOutOfRange,
    StaleBatch,
    TickerMisuse,
    TxidWentBackwards,
    UndecodableEvent,
    UnknownBatch,
    UnknownConsumer,
    UnknownDeadLetter,
    UnknownMessage,
    UnknownQueue,
)
from pglogq.models import ConsumerInfo, DeadLetter, InFlight, Message, QueueInfo, SeekPlan, Undecodable
from pglogq.retry import RetryPolicy
from pglogq.tickerd.inprocess import AsyncTickerHandle, TickerHandle, start_async_ticker, start_ticker

__version__ = "0.1.0"

__all__ = [
    "AlreadyExists",
    "AsyncBatch",
    "AsyncClient",
    "AsyncConsumer",
    "AsyncDelivery",
    "AsyncTickerHandle",
    "Batch",
    "BatchLost",
    "BatchOpen",
    "CancelConflict",
    "Client",
    "ClientClosed",
    "Consumer",
    "ConsumerInfo",
    "DeadLetter",
    "Delivery",
    "DependentObjects",
    "InFlight",
    "InstallNotPermitted",
    "InvalidArgument",
    "InvalidConfig",
    "InvalidDelay",
    "InvalidInput",
    "InvalidName",
    "InvalidPayload",
    "InvalidProgress",
    "Message",
    "MessageNotInBatch",
    "NotFound",
    "PayloadTooLarge",
    "PglogqError",
    "QueueInUse",
    "QueueInfo",
    "RetryPolicy",
    "RunStats",
    "SchemaMismatch",
    "SchemaTooNew",
    "SeekOutOfRange",
    "SeekPlan",
    "StaleBatch",
    "TickerHandle",
    "TickerMisuse",
    "TxidWentBackwards",
    "Undecodable",
    "UndecodableEvent",
    "UnknownBatch",
    "UnknownConsumer",
    "UnknownDeadLetter",
    "UnknownMessage",
    "UnknownQueue",
    "start_async_ticker",
    "start_ticker",
]
