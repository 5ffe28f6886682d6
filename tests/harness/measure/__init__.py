"""Measurement scripts for pglogq alone (no peers): the consumer runtime
(``python -m tests.harness.measure.consumer``), the ticker daemon
(``python -m tests.harness.measure.ticker``) and failure handling
(``python -m tests.harness.measure.failures``).  Each prints its own ``--help``."""
