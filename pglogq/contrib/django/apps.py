"""The Django app of pglogq: ``INSTALLED_APPS = [..., "pglogq.contrib.django"]``."""

from __future__ import annotations

from django.apps import AppConfig


class PglogqConfig(AppConfig):
    name = "pglogq.contrib.django"
    label = "pglogq"
    verbose_name = "pglogq"
