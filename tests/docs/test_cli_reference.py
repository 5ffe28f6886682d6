"""docs/reference/cli.md is generated from the commands: fail when it is out of date."""

from __future__ import annotations

from tests.support.paths import REPO
from tests.tools import cli_docgen as docgen

PAGE = REPO / "docs" / "reference" / "cli.md"


def test_cli_reference_is_up_to_date() -> None:
    assert PAGE.read_text(encoding="utf-8") == docgen.render(), (
        "docs/reference/cli.md is stale: run `.venv/bin/python -m tests.tools.cli_docgen > docs/reference/cli.md`"
    )


def test_cli_reference_covers_every_command_and_exit_code() -> None:
    text = docgen.render()
    for path in ("schema install", "schema sql", "queue create", "queue config", "consumer seek", "send",
                 "receive", "tail", "status", "dlq replay-all", "dlq purge", "demo"):
        assert f"### `pglogq {path}`" in text or f"#### `pglogq {path}`" in text, path
    for code in range(12):
        assert f"| {code} |" in text
    assert "`pglogq worker`" in text and "`pglogq ticker run`" in text
    assert max(len(line) for line in text.split("```text")[1].splitlines()) <= 80
