"""pglogq is not on PyPI yet: an install line a reader copies must work from the checkout.

`pip install 'pglogq[dashboard]'` in the README failed for a new user (no such package on the
index; it worked only once pglogq was installed from the checkout, which pip then took as
satisfying the name).  Every line of the README, the docs, the examples and the package's own
help that installs pglogq by name must say it is for once it is published, next to the
`pip install -e '.[extra]'` that works today.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO

BY_NAME = re.compile(r"""pip install[^\n`]*?['"]?pglogq\[""")


def _files() -> list[Path]:
    docs = [p for p in (REPO / "docs").rglob("*.md") if p.name != "changelog.md"]
    return [REPO / "README.md", *docs, *(REPO / "examples").glob("*.py"), *(REPO / "pglogq").rglob("*.py")]


def test_an_install_by_name_says_it_is_for_once_published() -> None:
    bad = []
    for path in _files():
        lines = path.read_text(encoding="utf-8").splitlines()
        for n, line in enumerate(lines, 1):
            if not BY_NAME.search(line):
                continue
            # the line itself, or the sentence around it (the line before and after)
            around = " ".join(lines[max(0, n - 2): n + 1])
            if "published" not in around:
                bad.append(f"{path.relative_to(REPO)}:{n}: {line.strip()}")
    why = "install from the checkout (pip install -e '.[extra]') until pglogq is published"
    assert not bad, why + ":\n" + "\n".join(bad)


def test_the_rule_sees_an_install_by_name() -> None:
    assert BY_NAME.search("Watch it: `pip install 'pglogq[dashboard]'`, then")
    assert BY_NAME.search("pip install pglogq[otel] opentelemetry-sdk")
    assert not BY_NAME.search("pip install -e '.[dashboard]'")
