"""The systems a run measures: pglogq itself, the PostgreSQL ceiling, and the alternatives."""

from __future__ import annotations

from pglogq.bench.systems.base import System
from pglogq.bench.systems.jobs_table import JobsTable
from pglogq.bench.systems.pglogq_system import Pglogq
from pglogq.bench.systems.pgqueuer_system import PgQueuer
from pglogq.bench.systems.procrastinate_system import Procrastinate
from pglogq.bench.systems.rabbitmq import RabbitMQ
from pglogq.bench.systems.raw_postgres import RawPostgres
from pglogq.bench.systems.redis_streams import RedisStreams

ALL: tuple[type[System], ...] = (
    Pglogq,
    RawPostgres,
    JobsTable,
    PgQueuer,
    Procrastinate,
    RedisStreams,
    RabbitMQ,
)

__all__ = ["ALL", "JobsTable", "PgQueuer", "Pglogq", "Procrastinate", "RabbitMQ", "RawPostgres",
           "RedisStreams", "System"]
