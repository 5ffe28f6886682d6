"""Comments and documents say why, never "issue N": the tracker such numbers point at is not in
the repository, so a reader of the code cannot follow them.  A reference names the reason (what
the code guards against) or a page of the documentation (docs/decisions/ for a choice made).

The scan covers what a clone holds: the package, the SQL, the tests, the documentation, the
examples and the daemon's deployment files, by path and by content.  tests/upgrade/ holds frozen
earlier schema versions (data, never edited) and is left out, and so is this file, which spells the
forms out.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO

SCANNED = ["pglogq", "sql", "tests", "docs", "examples", "ticker", "README.md", "pyproject.toml"]
SKIPPED_DIRS = {"__pycache__", ".venv", "node_modules", ".mypy_cache", ".ruff_cache", ".pytest_cache"}
FROZEN = [Path("tests") / "upgrade", Path(__file__).resolve().relative_to(REPO)]
TEXT_SUFFIXES = {".py", ".sql", ".md", ".toml", ".yml", ".yaml", ".txt", ".html", ".cfg", ".ini", ".service",
                 ".rules", ".j2", ".sh", ""}

_ISSUE = "issue"
TRACKER_REF = re.compile(
    rf"\b{_ISSUE}s?[ -]#?\d+"  # issue 12, issue #12, issues 12 and 21, issue-15 (a folder name)
    r"|(?:^|[\s(;,])#\d+(?:\s?[-\u2013]\s?#\d+)?\b(?![\w-])"  # #4, #9-#12: an item of a tracker's issue
    , re.IGNORECASE,
)


def tracker_refs(root: Path) -> list[str]:
    """Every path or line under root that names a tracker item, as ``path:line: text``."""
    found: list[str] = []
    for top in SCANNED:
        start = root / top
        paths = [start] if start.is_file() else sorted(start.rglob("*"))
        for path in paths:
            rel = path.relative_to(root)
            if any(part in SKIPPED_DIRS for part in rel.parts) or any(rel.is_relative_to(f) for f in FROZEN):
                continue
            if TRACKER_REF.search(rel.as_posix()):
                found.append(f"{rel}: the path")
            if not path.is_file() or path.suffix not in TEXT_SUFFIXES:
                continue
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            for number, line in enumerate(text.splitlines(), 1):
                if TRACKER_REF.search(line):
                    found.append(f"{rel}:{number}: {line.strip()[:120]}")
    return found


def test_no_comment_or_document_points_at_a_tracker_item() -> None:
    found = tracker_refs(REPO)
    assert not found, "say why instead of naming a tracker item:\n" + "\n".join(found)


def test_the_scan_finds_each_form_of_reference(tmp_path: Path) -> None:
    """The check itself: each form found, in content and in a path; ordinary '#' text is not."""
    hits = [
        f"x = 1  # see {_ISSUE} 12",
        f"regression of {_ISSUE} #7",
        f"the fixes of {_ISSUE}s 12 and 21",
        f'"""{_ISSUE.capitalize()} 16 #3: retries per type."""',
        "a cancellation that lasts (#6)",
        "Regression tests of #9-#12.",
    ]
    misses = [
        "x = 1  # a comment",
        "see [the guide](how-to/workers.md#share-consumers)",
        "color: #fff; width: 100%",
        "SELECT 1; -- #rows",
        "an issued batch id 12",
    ]
    for line in hits:
        assert TRACKER_REF.search(line), line
    for line in misses:
        assert not TRACKER_REF.search(line), line
    (tmp_path / "docs" / f"{_ISSUE}-15").mkdir(parents=True)
    (tmp_path / "docs" / "page.md").write_text("\n".join(["# A page", *misses, hits[0]]) + "\n")
    assert tracker_refs(tmp_path) == [f"docs/{_ISSUE}-15: the path", f"docs/page.md:{len(misses) + 2}: {hits[0]}"]
