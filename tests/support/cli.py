"""Helpers for the CLI tests: run a command through click's runner against a real database."""

from __future__ import annotations

import array
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import termios
from pathlib import Path
from typing import Any

from click.testing import CliRunner, Result

from pglogq.cli import main


def run(dsn: str | None, *args: str, input: str | None = None, env: dict[str, str | None] | None = None) -> Result:
    """``pglogq ARGS --dsn DSN``; stdin is never a terminal here."""
    argv = [*args, "--dsn", dsn] if dsn else list(args)
    return CliRunner(env=env).invoke(main, argv, input=input, prog_name="pglogq")


def ok(dsn: str | None, *args: str, input: str | None = None) -> Result:
    r = run(dsn, *args, input=input)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr, r.exception)
    return r


def js(dsn: str | None, *args: str, input: str | None = None) -> Any:
    """Run with --json and parse stdout."""
    return json.loads(ok(dsn, *args, "--json", input=input).stdout)


def fails(dsn: str | None, code: int, *args: str, input: str | None = None) -> Result:
    r = run(dsn, *args, input=input)
    assert r.exit_code == code, (r.exit_code, r.stdout, r.stderr, r.exception)
    lines = r.stderr.strip().splitlines()
    assert lines and lines[-1].startswith("pglogq: error: "), r.stderr
    return r


# -- a `pglogq` process under attack, and signs of where it waits ----------------------------

# Run in the child before the console script: SIGINT and SIGTERM as a user's terminal gives
# them.  A test runner started with SIGINT ignored (a background job of a non-interactive
# shell) passes that on through exec, and Python then leaves SIGINT ignored: a test sending
# Ctrl-C would send nothing.
_DEFAULT_SIGNALS = (
    "import os, signal, sys\n"
    "for s in (signal.SIGINT, signal.SIGTERM):\n"
    "    signal.signal(s, signal.SIG_DFL)\n"
    "signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT, signal.SIGTERM})\n"
    "os.execv(sys.argv[1], sys.argv[1:])\n"
)


def console_script() -> str:
    exe = Path(sys.executable).parent / "pglogq"
    assert exe.exists(), f"console script not installed next to {sys.executable}"
    return str(exe)


def spawn(dsn: str, *args: str, **kwargs: Any) -> subprocess.Popen[bytes]:
    """``pglogq ARGS --dsn DSN`` as a process (same pid as the command), with SIGINT and SIGTERM
    handled as in a terminal whatever the test runner ignores or blocks."""
    argv = [sys.executable, "-c", _DEFAULT_SIGNALS, console_script(), *args, "--dsn", dsn]
    return subprocess.Popen(argv, **kwargs)


def sleeping(pid: int) -> bool:
    """Whether the main thread of ``pid`` waits in the kernel (state S: a blocked read, write or
    poll), as opposed to running or runnable (Linux /proc)."""
    stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    return stat[stat.rindex(")") + 1:].split()[0] == "S"


def measured_pipe() -> tuple[int, int, int]:
    """A new pipe (read end, write end) and how many bytes it takes before a writer blocks,
    measured on it by filling and emptying it (never assumed)."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    capacity = 0
    with contextlib.suppress(BlockingIOError):
        while True:
            capacity += os.write(w, b"#" * 65536)
    left = capacity
    while left:
        left -= len(os.read(r, left))
    os.set_blocking(w, True)
    return r, w, capacity


def unread(fd: int) -> int:
    """Bytes waiting in the pipe whose read end is ``fd``."""
    buf = array.array("i", [0])
    fcntl.ioctl(fd, termios.FIONREAD, buf)
    return buf[0]
