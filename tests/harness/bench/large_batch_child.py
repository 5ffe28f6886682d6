"""Child process of the large-batch scenario: drain one consumer and report the process's own
peak memory (VmHWM) as JSON on stdout.

``python -m tests.harness.bench.large_batch_child DSN QUEUE CONSUMER MODE PAGE``; MODE is ``consumer``
(pglogq.Consumer with a no-op handler) or ``client`` (Client.receive / ack loop)."""

from __future__ import annotations

import json
import resource
import sys
import time

import pglogq
from tests.harness.bench.consumer_adapter import run_consumer


def rss_kb(field: str = "VmHWM") -> int:
    """Peak (VmHWM) or current (VmRSS) resident set of this process, in kB.

    Not ``ru_maxrss``: on Linux that survives exec, so a child reports the peak of the parent it
    was forked from.  The high-water mark of /proc belongs to this program's own memory."""
    try:
        with open("/proc/self/status", encoding="ascii") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return int(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)


def main(argv: list[str]) -> int:
    dsn, queue, consumer, mode, page = argv[0], argv[1], argv[2], argv[3], int(argv[4])
    with pglogq.Client(dsn) as client:
        client.queue_info(queue)  # connect before measuring
        start_rss = rss_kb("VmRSS")
        if mode == "consumer":
            count, seconds = run_consumer(dsn, queue, consumer, max_messages=page)
        else:
            count = 0
            t0 = time.time()
            while True:
                batch = client.receive(queue, consumer, max_messages=page)
                if not batch:
                    break
                count += len(batch)
                batch.ack()
            seconds = time.time() - t0
    print(json.dumps({"count": count, "seconds": seconds, "rss_start_kb": start_rss, "rss_peak_kb": rss_kb()}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
