"""docs/reference/cli.md is generated from the commands (``python -m tests.tools.docgen``; its
staleness is checked with every generated page by tests/docs/test_pages.py): it covers every command."""

from __future__ import annotations

from tests.tools import docgen


def test_cli_reference_covers_every_command_and_exit_code() -> None:
    text = docgen.cli_reference()
    for path in ("schema install", "schema sql", "queue create", "queue config", "consumer seek", "send",
                 "receive", "tail", "status", "dlq replay-all", "dlq purge", "demo"):
        assert f"### `pglogq {path}`" in text or f"#### `pglogq {path}`" in text, path
    for code in range(12):
        assert f"| {code} |" in text
    assert "`pglogq worker`" in text and "`pglogq ticker run`" in text
    assert max(len(line) for line in text.split("```text")[1].splitlines()) <= 80
