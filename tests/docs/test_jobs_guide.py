"""What docs/from-a-jobs-table.md teaches a team porting its job system.

Its blocks run (tests/docs/test_pages.py, tests/docs/test_repl_paste.py); these check the
patterns it shows, which a reader copies into production code."""

from __future__ import annotations

import ast
import re

from tests.docs.test_pages import DOCS, blocks_of

GUIDE = DOCS / "from-a-jobs-table.md"


def _python_blocks() -> list[ast.Module]:
    return [ast.parse(b.code) for b in blocks_of(GUIDE) if b.lang == "python"]


def _is_default_handler(decorator: ast.expr) -> bool:
    """``@consumer.handler()``: no type, so every type without a handler of its own."""
    return (
        isinstance(decorator, ast.Call)
        and isinstance(decorator.func, ast.Attribute)
        and decorator.func.attr == "handler"
        and not decorator.args
    )


def test_catch_all_handlers_never_acknowledge_an_unknown_type_silently() -> None:
    """A default handler that returns acknowledges a job whose type was mistyped as done; the
    guide's catch-alls fail it, with a reason that names the type."""
    found = 0
    for tree in _python_blocks():
        for node in ast.walk(tree):
            if isinstance(node, ast.FunctionDef) and any(_is_default_handler(d) for d in node.decorator_list):
                found += 1
                raises = [n for n in ast.walk(node) if isinstance(n, ast.Raise)]
                assert raises, f"the catch-all {node.name}() returns: it acknowledges an unknown job type"
                text = ast.unparse(raises[0])
                assert "Nack" in text and "msg.type" in text, f"{node.name}(): {text}"
    assert found, "the guide shows no catch-all handler any more: drop this test with it"


def test_an_expected_failure_is_a_nack() -> None:
    """The declined card is an expected failure: ``pglogq.Nack`` (one log line), not an
    exception with a traceback in the worker's log."""
    for tree in _python_blocks():
        for node in ast.walk(tree):
            if isinstance(node, ast.Raise) and node.exc is not None and "card declined" in ast.unparse(node.exc):
                assert ast.unparse(node.exc).startswith("pglogq.Nack("), ast.unparse(node)
                return
    raise AssertionError("no declined card in the guide")


def test_job_ids_are_not_assumed() -> None:
    """`pglogq job show jobs 5` was right only on a database where nothing was sent before."""
    for b in blocks_of(GUIDE):
        if b.lang in ("bash", "sh"):
            assert not re.search(r"pglogq job show \S+ \d+", b.code), f"{b.where}: {b.code}"


def test_the_guide_runs_its_jobs_on_a_share_consumer() -> None:
    """Jobs want any idle worker to take the next one (a share consumer), not whole batches: every
    subscription the guide makes is a share one, and it says when to choose which kind."""
    subscribes = [
        node for tree in _python_blocks() for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "subscribe"
    ]
    assert subscribes, "the guide subscribes nothing any more"
    for call in subscribes:
        share = [k for k in call.keywords if k.arg == "share"]
        assert share and ast.unparse(share[0].value) == "True", ast.unparse(call)
    text = GUIDE.read_text(encoding="utf-8")
    assert "## Share consumer or ordinary consumer: which one" in text
    assert "--share" in text


def test_the_tutorials_job_chapter_uses_a_share_consumer() -> None:
    tutorial = DOCS / "tutorial.md"
    shell = "\n".join(b.code for b in blocks_of(tutorial) if b.lang == "bash")
    assert re.search(r"pglogq consumer subscribe \S+ \S+ --share", shell)
    text = tutorial.read_text(encoding="utf-8")
    assert "A share consumer for **jobs**" in text and "An ordinary consumer for **event streams**" in text
