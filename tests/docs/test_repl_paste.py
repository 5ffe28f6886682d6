"""The pages' Python blocks survive being pasted into the interactive interpreter.

tests/docs/test_pages.py runs each Python block as a script, but the pages tell the reader to keep
one Python session open and paste.  The interactive interpreter of Python 3.10 to 3.12 reads a
paste line by line: a blank line ends an indented block (so a blank line inside a function body
cuts it in two), and an unindented line right after an indented block, with no blank line
between, is a SyntaxError, and the whole statement is lost.  On a page that continues itself
the loss cascades (a batch never acknowledged, a count that comes out wrong three steps later).

``code.InteractiveConsole`` is that reader, whatever version runs the tests: these tests push
every line of every block into one, as a paste does, with a blank line after each block (the
reader presses Enter).  A block with a top-level ``await`` is for ``python -m asyncio``, whose
console compiles with top-level await allowed and runs the statement on its event loop: so does
this one.
"""

from __future__ import annotations

import ast
import code
import contextlib
import inspect
import io
import os
import sys
import types
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psycopg
import pytest

from tests.docs.test_pages import ALL_PAGES, REPO, RUN_LANGS, SESSION_PHRASE, Block, PageRun, blocks_of, page_id
from tests.support.db import with_db


class PasteConsole(code.InteractiveConsole):
    """An interactive console that records what went wrong instead of printing a traceback."""

    def __init__(self, namespace: dict[str, Any], run_coroutine: Any = None) -> None:
        super().__init__(namespace, filename="<stdin>")
        self.compile.compiler.flags |= ast.PyCF_ALLOW_TOP_LEVEL_AWAIT
        self.run_coroutine = run_coroutine
        self.errors: list[BaseException] = []

    def runcode(self, code: types.CodeType) -> None:
        try:
            if code.co_flags & inspect.CO_COROUTINE:
                if self.run_coroutine is None:
                    raise RuntimeError("top-level await outside an asyncio console")
                self.run_coroutine(types.FunctionType(code, self.locals)())
            else:
                exec(code, self.locals)
        except SystemExit:
            raise
        except BaseException as exc:
            self.errors.append(exc)

    def showsyntaxerror(self, filename: str | None = None, **kwargs: Any) -> None:
        exc = sys.exc_info()[1]
        assert exc is not None
        self.errors.append(exc)

    def showtraceback(self) -> None:
        exc = sys.exc_info()[1]
        assert exc is not None
        self.errors.append(exc)

    def paste(self, text: str) -> list[BaseException]:
        """Push the lines of ``text`` as a paste does, then one blank line; what went wrong."""
        self.errors = []
        for line in text.splitlines():
            self.push(line)
        if self.push(""):
            # still waiting for more: the paste ended inside a bracket or a string
            self.resetbuffer()
            self.errors.append(SyntaxError("the block ends inside an unfinished statement"))
        return self.errors


def pasted(b: Block) -> bool:
    return b.lang == "python" and b.mark not in ("example", "no-test")


def _describe(b: Block, errors: list[BaseException]) -> str:
    out = []
    for e in errors:
        if isinstance(e, SyntaxError):
            line = (e.text or "").rstrip()
            out.append(f"{type(e).__name__}: {e.msg}: {line!r}")
        else:
            out.append(f"{type(e).__name__}: {e}")
    return f"{b.where}: pasted into the interactive interpreter, the block fails:\n  " + "\n  ".join(out)


# --- what the reader sees, without a database: every page, every pasted block --------------------

_PASTED_PAGES = [p for p in ALL_PAGES if any(pasted(b) for b in blocks_of(p))]


@pytest.mark.parametrize("path", _PASTED_PAGES, ids=page_id)
def test_every_python_block_compiles_as_a_paste(path: Path) -> None:
    """Each block, pasted alone, compiles statement by statement (nothing is run)."""
    failures = []
    for b in blocks_of(path):
        if not pasted(b):
            continue
        console = PasteConsole({"__name__": "__console__"})
        console.runcode = lambda code: None  # type: ignore[method-assign]  # compile only
        errors = console.paste(b.code)
        if errors:
            failures.append(_describe(b, errors))
    assert not failures, "\n".join(failures)


def test_the_console_reads_as_the_interpreter_does() -> None:
    """The two ways a paste breaks, and the fix for each, as the 3.10-3.12 interpreter sees them."""
    console = PasteConsole({})
    console.runcode = lambda code: None  # type: ignore[method-assign]
    assert console.paste("for i in range(2):\n    print(i)\nprint('after')\n")
    assert not console.paste("for i in range(2):\n    print(i)\n\nprint('after')\n")
    assert console.paste("def f():\n    x = 1\n\n    return x\n")
    assert not console.paste("def f():\n    x = 1\n    return x\n")
    assert not console.paste("x = await something()\n")  # an asyncio console


# --- the pages that continue themselves, run as one session ---------------------------------------


def _session_pages() -> list[Path]:
    out = []
    for p in ALL_PAGES:
        session = p.name == "README.md" or SESSION_PHRASE in p.read_text(encoding="utf-8")
        if session and any(b.lang in RUN_LANGS and b.mark in (None, "expect-error") for b in blocks_of(p)):
            out.append(p)
    return out


class ReplPageRun(PageRun):
    """Runs a page's blocks in order; the Python blocks are pasted into one console."""

    def __init__(self, dsn: str, workdir: Path) -> None:
        super().__init__(dsn, workdir)
        self.ns = {"__name__": "__console__"}
        self.console = PasteConsole(self.ns, self.loop.run_until_complete)
        self.printed: list[tuple[Block, str]] = []

    def python(self, b: Block) -> None:
        out = io.StringIO()
        with contextlib.redirect_stdout(out):
            errors = self.console.paste(b.code)
        self.printed.append((b, out.getvalue()))
        if errors:
            if b.mark == "expect-error":
                raise errors[0]
            raise AssertionError(_describe(b, errors)) from errors[0]


def run_as_session(path: Path, dsn: str, tmp_path: Path) -> ReplPageRun:
    run = ReplPageRun(dsn, tmp_path)
    try:
        for b in blocks_of(path):
            if b.lang in RUN_LANGS and b.mark in (None, "expect-error"):
                run.run(b)
    finally:
        run.close()
    return run


@pytest.mark.parametrize("path", _session_pages(), ids=page_id)
def test_page_runs_pasted_into_one_session(
    path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """What the page tells the reader to do: one Python session, every block pasted in order
    (bash and SQL blocks run between them, as the reader runs them in a shell)."""
    monkeypatch.setenv("PGLOGQ_DSN", dsn)
    monkeypatch.chdir(tmp_path)
    run_as_session(path, dsn, tmp_path)


def test_tutorial_dead_letters_mallory_when_pasted(
    dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The tutorial's failure story, pasted: the second attempt dead-letters mallory (step 6) and
    step 7 finds and replays that dead letter.  A lost step 5 used to leave the batch unacknowledged
    and step 6 printed ``retry`` twice, with nothing to replay."""
    monkeypatch.setenv("PGLOGQ_DSN", dsn)
    monkeypatch.chdir(tmp_path)
    run = run_as_session(REPO / "docs" / "tutorial.md", dsn, tmp_path)
    printed = "".join(text for _, text in run.printed)
    assert "mailer: mallory failed (invalid email address): retry" in printed, printed
    assert "mailer: mallory failed (invalid email address): dead" in printed, printed
    assert "'mallory', 'invalid email address')]" in printed, printed


@pytest.fixture
def database_without_pglogq(server_dsn: str) -> Iterator[str]:
    """A new, empty database: what a reader has before the first block (no schema installed)."""
    name = f"pglogq_docs_bare_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE template0')
    try:
        yield with_db(server_dsn, name)
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.mark.parametrize("page", ["docs/tutorial.md", "docs/from-a-jobs-table.md"])
def test_first_pages_run_on_a_database_without_pglogq(
    page: str, database_without_pglogq: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The pages a new user starts with install the schema themselves: the page test's database
    has it installed already, a reader's new database has not (the jobs guide's first block
    failed there with a raw InvalidSchemaName)."""
    monkeypatch.setenv("PGLOGQ_DSN", database_without_pglogq)
    monkeypatch.chdir(tmp_path)
    run = run_as_session(REPO / page, database_without_pglogq, tmp_path)
    if page.endswith("from-a-jobs-table.md"):
        printed = "".join(text for _, text in run.printed)
        assert "dead 1 card declined" in printed, printed
