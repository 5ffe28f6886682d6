"""``manage.py pglogq_ticker [options of pglogq-ticker]`` — the ticker daemon on the project's
database (the DSN comes from the settings)."""

from __future__ import annotations

from pglogq.contrib.django._command import PassThroughCommand
from pglogq.tickerd.cli import command


class Command(PassThroughCommand):
    help = "Run the pglogq ticker on the project's database; see `pglogq-ticker --help`."
    target = command
    prog = "pglogq_ticker"
