"""Generate the synchronous twins of the asyncio sources.

The asyncio code is the source of truth; each sync module is produced from it by word-level
rewriting and committed.  Run ``python -m tests.tools.unasync`` after editing an async source, and
``python -m tests.tools.unasync --check`` (run by the tests) to fail when the twins drift.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

PKG = Path(__file__).resolve().parents[2] / "pglogq"
"""The source package the twins live in (this tool works on the checkout, not on a wheel)."""

# async source → generated sync module
PAIRS: dict[str, str] = {
    "client_async.py": "client.py",
    "consumer_async.py": "consumer.py",
    "cluster/sharded_client_async.py": "cluster/sharded_client.py",
    "_wakeup_async.py": "_wakeup.py",
    "_consumer_loop_async.py": "_consumer_loop.py",
    "cluster/sharded_consumer_async.py": "cluster/sharded_consumer.py",
    "_outcomes_async.py": "_outcomes.py",
}

WORDS: dict[str, str] = {
    "AsyncShardedClient": "ShardedClient",
    "AsyncClusterClient": "ClusterClient",
    "AsyncClient": "Client",
    "AsyncBatch": "Batch",
    "AsyncConsumer": "Consumer",
    "AsyncDelivery": "Delivery",
    "AsyncWakeup": "Wakeup",
    "AsyncConnectionPool": "ConnectionPool",
    "AsyncConnection": "Connection",
    "AsyncIterator": "Iterator",
    "AsyncGenerator": "Generator",
    "asynccontextmanager": "contextmanager",
    "__aenter__": "__enter__",
    "__aexit__": "__exit__",
    "__aiter__": "__iter__",
    "__anext__": "__next__",
    "aclose": "close",
    "_concurrency_async": "_concurrency",
    "client_async": "client",
    "consumer_async": "consumer",
    "sharded_client_async": "sharded_client",
    "_wakeup_async": "_wakeup",
    "_consumer_loop_async": "_consumer_loop",
    "sharded_consumer_async": "sharded_consumer",
    "_outcomes_async": "_outcomes",
}

PATTERNS: list[tuple[str, str]] = [
    (r"\basync def ", "def "),
    (r"\basync with ", "with "),
    (r"\basync for ", "for "),
    (r"\bawait ", ""),
    (r"\bclient for asyncio\b", "client (blocking)"),
    (r"\bclient of a cluster of shards, for asyncio\b", "client of a cluster of shards (blocking)"),
]


def _dedupe_imports(line: str) -> str:
    m = re.match(r"^(from \S+ import )(.+)$", line)
    if not m or "(" in line:
        return line
    seen: list[str] = []
    for name in (n.strip() for n in m.group(2).split(",")):
        if name not in seen:
            seen.append(name)
    return m.group(1) + ", ".join(seen)


def convert(source: str, src_name: str) -> str:
    out = source
    for pat, rep in PATTERNS:
        out = re.sub(pat, rep, out)
    for word, rep in WORDS.items():
        out = re.sub(rf"\b{word}\b", rep, out)
    lines = [_dedupe_imports(line) for line in out.splitlines()]
    header = (
        f"# generated from pglogq/{src_name} by python -m tests.tools.unasync; do not edit\n"
        "# (change the async source and regenerate)\n"
    )
    return header + "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    check = "--check" in args
    stale = []
    for src, dst in PAIRS.items():
        src_path, dst_path = PKG / src, PKG / dst
        text = convert(src_path.read_text(encoding="utf-8"), src)
        if check:
            if not dst_path.exists() or dst_path.read_text(encoding="utf-8") != text:
                stale.append(dst)
        else:
            dst_path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date (run python -m tests.tools.unasync): " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
