"""The extra servers the sharding tests and harnesses start (tests/support/servers.py): each its
own data directory and port, pinned to a core (inherited by every process of the server), the
schema installed; an immediate stop loses no committed row and a restart keeps port and core."""

from __future__ import annotations

from pathlib import Path

import psycopg
import pytest

import pglogq
from tests.support.servers import core_for, cores, servers


@pytest.mark.embedded_only
def test_servers_are_separate_pinned_and_survive_an_immediate_stop(tmp_path: Path) -> None:
    with servers(3, base=tmp_path) as shards:
        assert len({s.port for s in shards}) == 3
        assert len({s.pgdata for s in shards}) == 3
        for i, s in enumerate(shards):
            assert s.cpu == core_for(i) == cores()[i % len(cores())]
            assert s.affinity() == {s.cpu}
            children = s.backend_affinities()
            assert children, s.name  # checkpointer, walwriter, ... exist once it runs
            assert all(cpus == {s.cpu} for cpus in children.values()), children
            with pglogq.Client(s.dsn) as client:  # the schema is installed
                client.create_queue(f"q_{s.name}")
                client.send(f"q_{s.name}", {"n": i})
        victim = shards[1]
        port, pid = victim.port, victim.pid()
        victim.crash()
        assert not victim.running
        with pytest.raises(psycopg.OperationalError):
            psycopg.connect(victim.dsn, connect_timeout=2).close()
        with shards[0].connect() as conn:  # the others go on
            assert conn.execute("SELECT 1").fetchone() == (1,)
        victim.start()
        assert victim.port == port and victim.pid() != pid
        assert victim.affinity() == {victim.cpu}
        with victim.connect() as conn:  # crash recovery kept the committed event
            row = conn.execute("SELECT count(*) FROM pglogq.event").fetchone()
            assert row == (1,)
    assert not any(s.pgdata.exists() for s in shards)
