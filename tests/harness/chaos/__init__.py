"""The total-queue chaos harness: Jepsen's check for pglogq, on one machine.

``python -m tests.harness.chaos --seed N --duration SECONDS [--out report.json]`` starts a throw-away
embedded PostgreSQL, runs producers (unique ids, each attempt recorded ok / failed /
indeterminate) and consumers (each delivery recorded before its ack) as subprocesses through a
fault-injecting TCP proxy, injects faults on a schedule derived from the seed, then drains the
queue and checks every subscriber: nothing acknowledged lost, nothing unexpected delivered.

Modules: :mod:`.server` (the private PostgreSQL), :mod:`.proxy` (asyncio TCP proxy that drops
connections), :mod:`.history` (the record files), :mod:`.producer` / :mod:`.consumer`
(the client processes; the ticker is the real daemon), :mod:`.nemesis` (faults driven from the harness),
:mod:`.checker` (the analysis) and :mod:`.harness` (the orchestration).
"""
