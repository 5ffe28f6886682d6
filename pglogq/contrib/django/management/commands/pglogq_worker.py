"""``manage.py pglogq_worker MODULE:ATTR [options of pglogq worker]`` — run a consumer in the
Django project (its apps are loaded, the DSN comes from the settings)."""

from __future__ import annotations

from pglogq.contrib.django._command import PassThroughCommand
from pglogq.worker import command


class Command(PassThroughCommand):
    help = "Run a pglogq consumer (MODULE:ATTR) with the project's settings; see `pglogq worker --help`."
    target = command
    prog = "pglogq_worker"
