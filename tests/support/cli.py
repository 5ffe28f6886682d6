"""Helpers for the CLI tests: run a command through click's runner against a real database."""

from __future__ import annotations

import json
from typing import Any

from click.testing import CliRunner, Result

from pglogq.cli import main


def run(dsn: str | None, *args: str, input: str | None = None, env: dict[str, str | None] | None = None) -> Result:
    """``pglogq ARGS --dsn DSN``; stdin is never a terminal here."""
    argv = [*args, "--dsn", dsn] if dsn else list(args)
    return CliRunner(env=env).invoke(main, argv, input=input, prog_name="pglogq")


def ok(dsn: str | None, *args: str, input: str | None = None) -> Result:
    r = run(dsn, *args, input=input)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr, r.exception)
    return r


def js(dsn: str | None, *args: str, input: str | None = None) -> Any:
    """Run with --json and parse stdout."""
    return json.loads(ok(dsn, *args, "--json", input=input).stdout)


def fails(dsn: str | None, code: int, *args: str, input: str | None = None) -> Result:
    r = run(dsn, *args, input=input)
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("pglogq: error: "), r.stderr
    return r
