"""The layers of the package, read from the source with ``ast``: sharding (``pglogq.cluster``) is a
layer above the core, and the consumer knows nothing of the sharded client.

The core is every module of ``pglogq`` outside ``pglogq/cluster/``, except the command line
(``pglogq/cli/``, a user of both layers), the package's front door (``pglogq/__init__.py``, which
re-exports ``ShardedClient``, ``AsyncShardedClient`` and ``ShardMap``) and the modules that keep the
documented old paths of moved modules working (``FRONT_DOORS``)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import pglogq.cluster
from tests.support.paths import REPO

PKG = REPO / "pglogq"

FRONT_DOORS = {
    PKG / "__init__.py",
    PKG / "cluster_admin.py",  # from pglogq import cluster_admin (docs/how-to/sharded-clients.md)
    PKG / "shardmap.py",  # pglogq.shardmap.shard_dsn
}
"""Modules of the top of the package that re-export the cluster layer (nothing else in them)."""

CONSUMER = ["consumer_async.py", "consumer.py", "_consumer_loop_async.py", "_consumer_loop.py",
            "_wakeup_async.py", "_wakeup.py"]
"""The consumer runtime's modules: none may import the sharded client."""

CLUSTER_NAMES = set(pglogq.cluster.__all__) | {"cluster", "cluster_admin", "shardmap"}
"""What ``from pglogq import ...`` would take from the cluster layer (through the front door)."""


def core_modules() -> list[Path]:
    return sorted(
        p for p in PKG.rglob("*.py")
        if not p.is_relative_to(PKG / "cluster") and not p.is_relative_to(PKG / "cli") and p not in FRONT_DOORS
    )


def package_of(path: Path) -> str:
    return ".".join(path.relative_to(REPO).with_suffix("").parts[:-1])


def imported(source: str, package: str) -> list[tuple[int, str]]:
    """Every module a module of ``package`` with this ``source`` imports (anywhere: at the top, in
    a function, under TYPE_CHECKING), as (line, dotted name); ``from a import b`` gives ``a`` and
    ``a.b`` (b may be a module)."""
    tree = ast.parse(source)
    out: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.extend((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from the module's own package up
                parts = package.split(".")
                parent = ".".join(parts[: len(parts) - node.level + 1])
                base = f"{parent}.{base}" if base else parent
            out.append((node.lineno, base))
            out.extend((node.lineno, f"{base}.{alias.name}") for alias in node.names)
    return out


def cluster_imports(source: str, package: str, where: str) -> list[str]:
    """The imports of a module (``source``, in ``package``) that reach the cluster layer."""
    found = []
    for line, name in imported(source, package):
        parts = name.split(".")
        front_door = len(parts) == 2 and parts[0] == "pglogq" and parts[1] in CLUSTER_NAMES
        if parts[:2] == ["pglogq", "cluster"] or front_door:
            found.append(f"{where}:{line}: {name}")
    return found


def test_the_core_does_not_import_the_cluster_layer() -> None:
    modules = core_modules()
    assert PKG / "consumer_async.py" in modules and PKG / "client_async.py" in modules
    found = [
        hit for path in modules
        for hit in cluster_imports(path.read_text(encoding="utf-8"), package_of(path), str(path.relative_to(REPO)))
    ]
    assert not found, "the core imports pglogq.cluster:\n" + "\n".join(found)


@pytest.mark.parametrize("name", CONSUMER)
def test_the_consumer_modules_do_not_import_the_sharded_client(name: str) -> None:
    path = PKG / name
    assert path.exists()
    found = [
        f"{line}: {mod}" for line, mod in imported(path.read_text(encoding="utf-8"), "pglogq")
        if "shard" in mod.lower() or mod.startswith("pglogq.cluster")
    ]
    assert not found, f"{name} imports the sharded client: {found}"


def test_the_front_doors_only_re_export() -> None:
    """The modules allowed to import the cluster layer from the top of the package hold nothing else
    (a module of the core cannot hide there)."""
    for path in FRONT_DOORS - {PKG / "__init__.py"}:
        tree = ast.parse(path.read_text(encoding="utf-8"))
        kinds = {type(node).__name__ for node in tree.body}
        assert kinds <= {"Expr", "Import", "ImportFrom", "Assign"}, (path, kinds)


@pytest.mark.parametrize("source", [
    "from pglogq.cluster import sharded_client_async\n",
    "import pglogq.cluster.shardmap\n",
    "from pglogq import cluster\n",
    "from pglogq import ShardedClient\n",
    "def f():\n    from .cluster.cluster_admin import init\n",
    "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from pglogq.cluster.sharded_client_async import X\n",
])
def test_the_check_sees_such_an_import(source: str) -> None:
    """The check itself: each way of importing the cluster layer is found in a module of the core
    (``pglogq``, or a subpackage for the relative import), and a harmless one is not."""
    assert cluster_imports(source, "pglogq", "probe")
    assert cluster_imports("from .. import cluster\n", "pglogq.tickerd", "probe")
    assert not cluster_imports("from pglogq import client_async, keys\nimport pglogq.consumer\n", "pglogq", "probe")
