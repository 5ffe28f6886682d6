"""Plain helpers shared by the tests (no fixtures: those are pytest plugins in tests/plugins/).

Import them by module, e.g. ``from tests.support.waiting import wait_for``.
"""
