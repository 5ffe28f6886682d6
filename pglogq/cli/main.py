"""Entry point of the ``pglogq`` command."""

from __future__ import annotations

import click


@click.group()
@click.version_option(package_name="pglogq")
def main() -> None:
    """pglogq: an append-only log queue on PostgreSQL."""
