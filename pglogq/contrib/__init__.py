"""Integrations with the stack around pglogq, each imported only when asked for.

- :mod:`pglogq.contrib.otel` — OpenTelemetry tracing of ``send`` and of the consumer runtime
  (the ``otel`` extra);
- :mod:`pglogq.contrib.django` — send in Django's transaction, management commands for the
  worker and the ticker (the ``django`` extra);
- :mod:`pglogq.contrib.sqlalchemy` — send through a SQLAlchemy ``Session`` or ``Connection``,
  sync or async, any PostgreSQL driver (the ``sqlalchemy`` extra).

``import pglogq`` imports none of these, nor the libraries they need.
"""
