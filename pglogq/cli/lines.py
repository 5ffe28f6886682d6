"""Whole lines to stdout, counted as they leave the process, and a Ctrl-C / SIGTERM that
ends the command between two lines (``pglogq tail``).

Why not ``click.echo``: a signal that lands while a write is blocked on a full pipe raised
KeyboardInterrupt out of the flush with the line still in Python's buffer; the line was not
counted, and Python flushed it at exit, so the closing count said one line fewer than stdout
got (or, for a line longer than the buffer, stdout ended with half a line).  Here the signal
handler never raises while lines are being written: it only records the signal and wakes the
writer, which waits for room with ``poll`` (on stdout and on a wake-up pipe) and writes at
most ``PIPE_BUF`` bytes at a time, which a pipe with room takes without blocking.  So the count
is updated only from what ``write`` returned, and the command stops where a line ends: before
the next line when the signal finds it between two lines, after the current one when part of
it is already out (stdout never ends with half a line).  A second signal abandons that line
(its reader may never read it): it stays cut and is not counted.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import sys
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from types import FrameType
from typing import Any

import click


class LineWriter:
    """Writes lines (each ending in a newline) to stdout; ``lines`` is how many left whole.

    While a page is written, :meth:`interrupt` (the signal handler) only takes note; the
    writer raises KeyboardInterrupt itself once the line in progress is out.  Elsewhere it
    raises at once, as Python's own Ctrl-C does, and only once: a signal during the clean-up
    that follows does nothing."""

    def __init__(self) -> None:
        self.lines = 0
        self.signals = 0  # signals received (a second one abandons a line in progress)
        self._writing = False
        self._raised = False
        self._fd: int | None = None
        self._wake_r = self._wake_w = -1
        self._encoding = self._errors = ""
        self._poll: Any = None
        stdout = sys.stdout
        if stdout is sys.__stdout__ and stdout is not None and hasattr(select, "poll"):
            try:
                fd = stdout.fileno()
                self._encoding = stdout.encoding or "utf-8"
                self._errors = stdout.errors or "strict"
                self._wake_r, self._wake_w = os.pipe()
                os.set_blocking(self._wake_r, False)
                os.set_blocking(self._wake_w, False)
                self._poll = select.poll()
                self._poll.register(fd, select.POLLOUT)
                self._poll.register(self._wake_r, select.POLLIN)
                self._fd = fd
            except (AttributeError, OSError, ValueError):
                self.close()  # stdout is no file descriptor here: click.echo, as in tests

    def close(self) -> None:
        for fd in (self._wake_r, self._wake_w):
            if fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(fd)
        self._wake_r = self._wake_w = -1

    def finish(self) -> None:
        """The command is ending: from now on a signal changes nothing."""
        self._raised = True

    def interrupt(self) -> None:
        """What Ctrl-C and SIGTERM do (called from the signal handler)."""
        self.signals += 1
        if self._writing:
            if self._wake_w >= 0:
                with contextlib.suppress(OSError):  # a full wake-up pipe has woken the writer already
                    os.write(self._wake_w, b"\0")
            return
        if not self._raised:
            self._raised = True
            raise KeyboardInterrupt

    def _stop(self) -> None:
        self._raised = True
        raise KeyboardInterrupt

    def write(self, lines: Sequence[str]) -> None:
        """Write ``lines`` (each ending in a newline); raise KeyboardInterrupt where a line ends
        if a signal came."""
        self._writing = True
        try:
            if self._fd is None:
                self._write_text(lines)
            else:
                self._write_fd(self._fd, [line.encode(self._encoding, self._errors) for line in lines])
        finally:
            self._writing = False
        if self.signals and not self._raised:
            self._stop()

    def _write_text(self, lines: Sequence[str]) -> None:
        for line in lines:
            if self.signals:
                self._stop()
            click.echo(line, nl=False)  # echo flushes: the line has left when it returns
            self.lines += 1

    def _write_fd(self, fd: int, lines: list[bytes]) -> None:
        data = memoryview(b"".join(lines))
        ends: list[int] = []
        for line in lines:
            ends.append((ends[-1] if ends else 0) + len(line))
        sys.stdout.flush()  # nothing printed through Python's buffer may come after these lines
        chunk = select.PIPE_BUF
        off = 0
        done = 0  # lines of this page written whole
        while done < len(lines):
            limit = len(data)
            if self.signals:
                start = ends[done - 1] if done else 0
                if off == start or self.signals > 1:
                    self._stop()
                limit = ends[done]  # finish the line already started, not one more
            if not self._wait(fd):
                continue  # woken by a signal: look again
            try:
                off += os.write(fd, data[off:min(off + chunk, limit)])
            except BlockingIOError:
                continue  # stdout made non-blocking by a process sharing it: wait for room again
            while done < len(lines) and ends[done] <= off:
                done += 1
                self.lines += 1

    def _wait(self, fd: int) -> bool:
        """Wait until stdout takes more (True) or a signal came (False)."""
        woken = False
        for ready, _events in self._poll.poll():
            if ready == self._wake_r:
                with contextlib.suppress(OSError):
                    while os.read(self._wake_r, 64):
                        pass
                woken = True
        return not woken or self.signals == 0


@contextmanager
def interrupts(writer: LineWriter) -> Iterator[None]:
    """Ctrl-C and SIGTERM go to ``writer.interrupt`` (a signal ignored by whoever started the
    command stays ignored, as Python leaves an ignored SIGINT)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(_signum: int, _frame: FrameType | None) -> None:
        writer.interrupt()

    old: dict[signal.Signals, Any] = {}
    for sig in (signal.SIGINT, signal.SIGTERM):
        if signal.getsignal(sig) != signal.SIG_IGN:
            old[sig] = signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, previous in old.items():
            signal.signal(sig, previous)
