"""The code map of docs/CONTRIBUTING.md is the tree: every module of the package, every package
folder and every top-level folder of tests/ has its place in it, and every file, folder and
``python -m`` module it names exists.  A map that drifts sends a newcomer to a file that moved
(the consumer was split in three, sharding moved to pglogq/cluster/): this test fails instead.

Folders whose every module the map names (in any row; small folders whose files a newcomer looks
up by name): the package's top level, pglogq/cluster/, tests/support/, tests/plugins/, tests/tools/.
The other folders are named by their row; their rows' names must exist but need not be all.
"""

from __future__ import annotations

import re
from pathlib import Path

from tests.support.paths import REPO
from tests.tools.unasync import PAIRS

CONTRIBUTING = REPO / "docs" / "CONTRIBUTING.md"
EVERY_MODULE_NAMED = ["pglogq", "pglogq/cluster", "tests/support", "tests/plugins", "tests/tools"]
ROOTS = ("pglogq/", "tests/", "docs/", "sql/", "examples/", "ticker/", ".ci/")
PATH_LIKE = re.compile(r"^\.?[\w./-]+(?:/|\.(?:py|sql|md|png|json|yml|service))$")


def rows() -> dict[str, str]:
    """The map's table: each folder it names (a cell may name several) to the text of its row."""
    table: dict[str, str] = {}
    for line in CONTRIBUTING.read_text().splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) == 2:
            for where in re.findall(r"`([^`]+)`", cells[0]):
                table[where] = cells[1]
    return table


def named_paths(where: str, text: str) -> list[tuple[str, list[Path]]]:
    """Each file or folder the text names, with where it may be: from the root when it starts at a
    top folder of the repository, else inside the row's folder."""
    found = []
    for token in re.findall(r"`([^`\s]+)`", text):
        if not PATH_LIKE.match(token):
            continue
        if token.startswith(ROOTS):
            found.append((token, [REPO / token]))
        else:
            found.append((token, [REPO / where / token]))
    return found


def test_every_name_in_the_map_exists() -> None:
    missing = []
    for where, text in rows().items():
        if not (REPO / where).exists():
            missing.append(f"row {where}")
        for token, candidates in named_paths(where, text):
            if not any(c.exists() for c in candidates):
                missing.append(f"{token} (row {where})")
    assert not missing, "the code map names what is not there: " + ", ".join(missing)


def test_every_python_m_command_names_a_module_that_exists() -> None:
    text = CONTRIBUTING.read_text()
    modules = set(re.findall(r"python -m (\w+(?:\.\w+)+)", text))
    assert modules, "no python -m command found: the pattern no longer matches the page"
    missing = [m for m in sorted(modules)
               if not ((REPO / m.replace(".", "/")).with_suffix(".py").exists()
                       or (REPO / m.replace(".", "/") / "__main__.py").exists())]
    assert not missing, f"CONTRIBUTING.md runs modules that do not exist: {missing}"


def test_every_package_folder_and_test_folder_has_a_row() -> None:
    table = rows()
    folders = [p for p in sorted((REPO / "pglogq").iterdir()) if (p / "__init__.py").exists()]
    folders += [p for p in sorted((REPO / "tests").iterdir()) if p.is_dir() and not p.name.startswith((".", "_"))]
    missing = []
    for folder in folders:
        rel = folder.relative_to(REPO).as_posix() + "/"
        if not any(where == rel or where.startswith(rel) for where in table):
            missing.append(rel)
    assert not missing, f"folders the code map has no row for: {missing}"


def test_every_module_of_the_listed_folders_is_named() -> None:
    named = {path.resolve() for where, text in rows().items()
             for _, candidates in named_paths(where, text) for path in candidates}
    missing = [module.relative_to(REPO).as_posix() for folder in EVERY_MODULE_NAMED
               for module in sorted((REPO / folder).glob("*.py"))
               if module.name != "__init__.py" and module.resolve() not in named]
    assert not missing, f"modules the code map does not name: {missing}"


def test_the_generated_twins_named_are_the_twins_unasync_makes() -> None:
    text = CONTRIBUTING.read_text()
    paragraph = text[text.index("Never edit a generated twin"):]
    paragraph = paragraph[:paragraph.index("\n\n")]
    named = set(re.findall(r"`(pglogq/[\w/]+\.py)`", paragraph))
    assert named == {f"pglogq/{twin}" for twin in PAIRS.values()}
