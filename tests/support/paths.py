"""Where things are, for tests that read the repository's files."""

from __future__ import annotations

from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
"""tests/"""
REPO = TESTS.parent
"""The repository's root (pyproject.toml, sql/, docs/, examples/)."""
UPGRADE_DATA = TESTS / "upgrade"
"""Earlier schema versions as one-file installs (v1-<commit>.sql): the upgrade tests start there."""
