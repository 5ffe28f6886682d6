"""The ticker's configuration as an operator meets it (names, misspellings, -h, the
effective configuration at start) and the silent-worker metric, through the installed
``pglogq-ticker`` script."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from tests.support.inflight import in_flight_job
from tests.support.tickers import Daemon, free_port
from tests.support.waiting import wait_for

BIN = Path(sys.executable).parent


def ticker(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    exe = BIN / "pglogq-ticker"
    assert exe.exists()
    return subprocess.run([str(exe), *args], capture_output=True, text=True, env=env, timeout=120, check=False)


def clean_env(dsn: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PGLOGQ_")}
    return {**env, "PGLOGQ_DSN": dsn, **extra}


def config_line(stderr: str) -> dict[str, Any]:
    for line in stderr.splitlines():
        try:
            doc = json.loads(line)
        except ValueError:
            continue
        if doc.get("event") == "config":
            return dict(doc)
    raise AssertionError(f"no config event in:\n{stderr}")


def test_dash_h_is_help(dsn: str) -> None:
    r = ticker("-h", env=clean_env(dsn))
    assert r.returncode == 0, r.stderr
    assert "PGLOGQ_TICKER_INTERVAL" in r.stdout and "--max-backoff" in r.stdout


def test_env_names_match_the_options_and_the_effective_configuration_is_logged(dsn: str) -> None:
    env = clean_env(dsn, PGLOGQ_TICKER_INTERVAL="9ms", PGLOGQ_TICKER_MAX_BACKOFF="1m",
                    PGLOGQ_TICKER_IDLE_INTERVAL="300ms")
    r = ticker("--once", "--log-format", "json", "--log-level", "DEBUG", env=env)  # --once: at DEBUG
    assert r.returncode == 0, r.stderr
    cfg = config_line(r.stderr)
    assert cfg["busy_interval"] == "9ms" and cfg["backoff_max"] == "1m" and cfg["idle_interval"] == "300ms"
    assert "password" not in cfg["databases"]
    # the setting's own name still works, and the command line wins over both
    env = clean_env(dsn, PGLOGQ_TICKER_BUSY_INTERVAL="7ms", PGLOGQ_TICKER_BACKOFF_MAX="2m")
    cfg = config_line(ticker("--once", "--log-format", "json", "--log-level", "DEBUG", "--busy-interval", "8ms",
                             env=env).stderr)
    assert cfg["busy_interval"] == "8ms" and cfg["backoff_max"] == "2m"


@pytest.mark.parametrize("name, suggestion", [("PGLOGQ_TICKER_INTREVAL", "PGLOGQ_TICKER_INTERVAL"),
                                              ("PGLOGQ_TICKER_BUSY_INTERVALS", "PGLOGQ_TICKER_BUSY_INTERVAL"),
                                              ("PGLOGQ_TICKER_COLOUR", None)])
def test_an_unknown_setting_is_refused(dsn: str, tmp_path: Path, name: str, suggestion: str | None) -> None:
    r = ticker("--once", env=clean_env(dsn, **{name: "9ms"}))
    assert r.returncode == 2, r.stderr
    assert f"unknown setting {name}" in r.stderr
    if suggestion:
        assert f"did you mean {suggestion}?" in r.stderr
    # the same in an env file
    env_file = tmp_path / "ticker.env"
    env_file.write_text(f"{name}=9ms\n")
    r = ticker("--once", "--env-file", str(env_file), env=clean_env(dsn))
    assert r.returncode == 2 and f"unknown setting {name}" in r.stderr


def test_silent_worker_metric(dsn: str, tmp_path: Path) -> None:
    in_flight_job(dsn, "w1", "90 seconds")
    port = free_port()
    d = Daemon(tmp_path / "ticker.log", "--dsn", dsn, "--metrics-port", str(port), env=clean_env(dsn))
    try:
        url = f"http://127.0.0.1:{port}/metrics"

        def scrape() -> str:
            try:
                with urllib.request.urlopen(url, timeout=10) as r:
                    return str(r.read().decode())
            except OSError:
                return ""

        wait_for(lambda: "pglogq_worker_silent_seconds{" in scrape(), "the silent-worker series")
        line = next(x for x in scrape().splitlines() if x.startswith("pglogq_worker_silent_seconds{"))
        assert 'worker="w1"' in line and 'consumer="nightly_report_builder"' in line
        assert float(line.rsplit(" ", 1)[1]) >= 90  # the report was moved 90 s back
        assert "pglogq_worker_in_flight_events{" in scrape()
    finally:
        d.close()
