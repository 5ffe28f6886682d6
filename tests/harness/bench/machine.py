"""What the numbers were measured on: machine, versions, server settings, load."""

from __future__ import annotations

import os
import platform
import sys
from importlib.metadata import PackageNotFoundError, version
from typing import Any

import psycopg

SERVER_SETTINGS = (
    "server_version", "fsync", "synchronous_commit", "wal_sync_method", "full_page_writes",
    "shared_buffers", "wal_buffers", "max_wal_size", "checkpoint_timeout", "autovacuum",
    "autovacuum_naptime", "max_connections", "work_mem", "jit",
)
PACKAGES = ("pglogq", "psycopg", "psycopg-binary", "psycopg-pool", "click", "matplotlib", "psutil",
            "redis", "pika", "pgqueuer", "procrastinate")


def cpu_model() -> str:
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def memory_bytes() -> int | None:
    try:
        import psutil

        return int(psutil.virtual_memory().total)
    except ImportError:
        return None


def load() -> list[float]:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:
        return []


def describe(dsn: str) -> dict[str, Any]:
    pkgs: dict[str, str | None] = {}
    for p in PACKAGES:
        try:
            pkgs[p] = version(p)
        except PackageNotFoundError:
            pkgs[p] = None
    with psycopg.connect(dsn) as conn:
        settings = {}
        for name in SERVER_SETTINGS:
            row = conn.execute("SELECT current_setting(%s, true)", (name,)).fetchone()
            settings[name] = row[0] if row else None
        row = conn.execute("SELECT version()").fetchone()
        pg_version = row[0] if row else ""
    return {
        "machine": {
            "platform": platform.platform(),
            "cpu": cpu_model(),
            "cpus": os.cpu_count(),
            "memory_bytes": memory_bytes(),
            "load_average_at_start": load(),
        },
        "python": sys.version.split()[0],
        "packages": pkgs,
        "postgresql": pg_version,
        "postgresql_settings": settings,
    }
