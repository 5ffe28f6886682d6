"""``pglogq dashboard`` as a process: it serves on localhost, makes and prints a token
when --actions has none, and that token (and only it) logs in; bad options are usage errors."""

from __future__ import annotations

import http.cookiejar
import os
import re
import subprocess
import sys
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterator

import pytest

import pglogq
from tests.support.cli import fails, run
from tests.support.tickers import free_port
from tests.support.waiting import wait_for


@pytest.fixture
def server(dsn: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if k != "PGLOGQ_DASHBOARD_TOKEN"}
    proc = subprocess.Popen(
        [sys.executable, "-c", "from pglogq.cli import main; main()", "--dsn", dsn, "dashboard", "--actions",
         "--port", str(port)],
        stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, env=env,
    )
    try:
        yield f"http://127.0.0.1:{port}", proc
    finally:
        proc.terminate()
        proc.wait(30)
        assert proc.stderr is not None
        proc.stderr.close()


def test_serves_and_prints_a_token_that_logs_in(server: tuple[str, subprocess.Popen[str]],
                                                client: pglogq.Client) -> None:
    base, proc = server
    assert proc.stderr is not None
    token = None
    for line in proc.stderr:
        m = re.match(r"actions token \(log in with it\): (\S+)", line)
        if m:
            token = m.group(1)
        if "pglogq dashboard on http://127.0.0.1:" in line:
            break
    assert token and len(token) >= 24

    def up() -> bool:
        try:
            with urllib.request.urlopen(base + "/", timeout=5) as r:
                return r.status == 200
        except OSError:
            return False

    wait_for(up, "the dashboard to answer")
    client.create_queue("q")
    jar = http.cookiejar.CookieJar()
    opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar))
    with pytest.raises(urllib.error.HTTPError) as wrong:
        opener.open(base + "/login", data=urllib.parse.urlencode({"token": token + "x"}).encode())
    assert wrong.value.code == 401
    wrong.value.close()
    with opener.open(base + "/login", data=urllib.parse.urlencode({"token": token}).encode()) as r:
        assert "signed in as <b>operator</b>" in r.read().decode()
    # a page of another name resolving to this address (DNS rebinding) gets nothing
    rebound = urllib.request.Request(base + "/", headers={"Host": f"evil.example:{base.rsplit(':', 1)[1]}"})
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(rebound)
    assert refused.value.code == 400
    refused.value.close()
    req = urllib.request.Request(base + "/actions/pause", data=b"queue=q",
                                 headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(req) as r:
        assert "queue q paused" in r.read().decode()
    assert client.queue_info("q")[0].paused


def test_bad_options_are_usage_errors(dsn: str) -> None:
    for args in (("--port", "65536"), ("--port", "-1"), ("--refresh", "0")):
        r = run(dsn, "dashboard", *args)
        assert r.exit_code == 2 and "Invalid value" in r.stderr, (args, r.stderr)
    assert "at least 8 characters" in fails(dsn, 2, "dashboard", "--token", "short").stderr
    assert "given twice" in fails(dsn, 2, "dashboard", "--token", "a=aaaaaaaa", "--token", "a=bbbbbbbb").stderr
