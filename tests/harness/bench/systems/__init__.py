"""The systems a run measures: pglogq itself, the PostgreSQL ceiling, and the alternatives."""

from __future__ import annotations

from tests.harness.bench.systems.base import System
from tests.harness.bench.systems.jobs_table import JobsTable
from tests.harness.bench.systems.pglogq_system import Pglogq
from tests.harness.bench.systems.pgque_system import PgQue
from tests.harness.bench.systems.pgqueuer_system import PgQueuer
from tests.harness.bench.systems.procrastinate_system import Procrastinate
from tests.harness.bench.systems.rabbitmq import RabbitMQ
from tests.harness.bench.systems.raw_postgres import RawPostgres
from tests.harness.bench.systems.redis_streams import RedisStreams, RedisStreamsFsyncAlways

ALL: tuple[type[System], ...] = (
    Pglogq,
    RawPostgres,
    PgQue,
    JobsTable,
    PgQueuer,
    Procrastinate,
    RedisStreams,
    RedisStreamsFsyncAlways,
    RabbitMQ,
)

__all__ = ["ALL", "JobsTable", "PgQue", "PgQueuer", "Pglogq", "Procrastinate", "RabbitMQ", "RawPostgres",
           "RedisStreams", "RedisStreamsFsyncAlways", "System"]
