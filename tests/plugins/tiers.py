"""The fast tier: which test files are marked ``slow`` (``pytest -m "not slow"``)."""

from __future__ import annotations

import pytest

# The fast tier (`pytest -m "not slow"`, docs/CONTRIBUTING.md): these 50 files take most of the
# suite's time (measured with --durations=0 over a whole run: together about 90 % of it), so they
# are marked slow as a whole; what is left runs every other file, each area's quick checks among
# them, in about three minutes on two cores.  A file joins this list when a whole run shows it
# among the slowest, never to hide a failure.
SLOW_FILES = frozenset({
    "tests/bench/test_smoke.py",
    "tests/cli/test_attacks.py",
    "tests/cli/test_cluster.py",
    "tests/cli/test_commands.py",
    "tests/cli/test_day_one.py",
    "tests/cli/test_day_one_round3.py",
    "tests/client/test_args.py",
    "tests/client/test_conn_transaction.py",
    "tests/client/test_partitions.py",
    "tests/client/test_payloads.py",
    "tests/client/test_sharded.py",
    "tests/consumer/test_cancel_and_poison.py",
    "tests/consumer/test_coop_workers.py",
    "tests/consumer/test_edges.py",
    "tests/consumer/test_lost_database.py",
    "tests/consumer/test_partitions.py",
    "tests/consumer/test_runtime.py",
    "tests/consumer/test_sharded.py",
    "tests/consumer/test_share_runtime.py",
    "tests/consumer/test_share_transactional.py",
    "tests/consumer/test_wakeup.py",
    "tests/dashboard/test_pages.py",
    "tests/dashboard/test_security.py",
    "tests/docs/test_examples.py",
    "tests/docs/test_fresh_clone.py",
    "tests/docs/test_pages.py",
    "tests/docs/test_repl_paste.py",
    "tests/integrations/test_capture.py",
    "tests/reliability/test_chaos.py",
    "tests/reliability/test_model.py",
    "tests/reliability/test_model_partitions.py",
    "tests/reliability/test_model_share.py",
    "tests/sql/test_batch.py",
    "tests/sql/test_cancel.py",
    "tests/sql/test_cluster.py",
    "tests/sql/test_counts.py",
    "tests/sql/test_dashboard_api.py",
    "tests/sql/test_dlq.py",
    "tests/sql/test_held_snapshot.py",
    "tests/sql/test_history.py",
    "tests/sql/test_lookup.py",
    "tests/sql/test_partitions.py",
    "tests/sql/test_queue_count_locks.py",
    "tests/sql/test_queue_lifecycle.py",
    "tests/sql/test_rule_owners.py",
    "tests/sql/test_send_options.py",
    "tests/sql/test_share.py",
    "tests/sql/test_upgrade.py",
    "tests/ticker/test_daemon.py",
    "tests/ticker/test_schedules.py",
})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    root = config.rootpath
    for item in items:
        if item.path.relative_to(root).as_posix() in SLOW_FILES:
            item.add_marker(pytest.mark.slow)
