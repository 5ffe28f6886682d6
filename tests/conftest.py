"""The test suite's root: it only registers the fixture plugins (tests/plugins/).

Fixtures are used by name (``def test_x(client, dsn): ...``); plain helpers are imported from
tests/support/ (``from tests.support.waiting import wait_for``).
"""

pytest_plugins = ["tests.plugins.database", "tests.plugins.pgbouncer", "tests.plugins.tiers"]

