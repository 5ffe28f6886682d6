"""The ticker's settings: defaults, environment variables, an env file, command-line values.

Precedence, highest first: a value given on the command line, the env file (``--env-file``,
re-read on SIGHUP), the process environment, the default below.  Every setting ``name`` has
the environment variable ``PGLOGQ_TICKER_<NAME>``, and every command-line option ``--x-y`` the
variable ``PGLOGQ_TICKER_X_Y`` (so ``--interval`` is ``PGLOGQ_TICKER_INTERVAL`` as well as
``PGLOGQ_TICKER_BUSY_INTERVAL``; ``--max-backoff`` is ``PGLOGQ_TICKER_MAX_BACKOFF`` as well as
``PGLOGQ_TICKER_BACKOFF_MAX``).  A ``PGLOGQ_TICKER_*`` variable that names no setting is refused
(a misspelling must not be ignored).  The database comes from ``--dsn`` (repeatable) or
``PGLOGQ_DSN``, else the embedded default (see :mod:`pglogq.dsn`).

Durations are seconds, or a number with a unit: ``5ms``, ``0.2s``, ``1m``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from pglogq.dsn import check_dsn

ENV_PREFIX = "PGLOGQ_TICKER_"

_UNITS = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str | float) -> float:
    """Seconds from ``0.2``, ``200ms``, ``1.5s``, ``2m``; refuses negative or malformed values."""
    if isinstance(text, (int, float)):
        value = float(text)
    else:
        m = re.fullmatch(r"\s*([0-9]*\.?[0-9]+)\s*(ms|s|m|h)?\s*", text)
        if not m:
            raise ValueError(f"not a duration: {text!r} (use seconds or e.g. 5ms, 0.2s, 1m)")
        value = float(m.group(1)) * _UNITS[m.group(2) or "s"]
    if value < 0:
        raise ValueError(f"a duration cannot be negative: {text!r}")
    return value


@dataclass(frozen=True)
class Settings:
    """How the ticker runs.  Intervals are in seconds."""

    dsns: tuple[str, ...] = ()
    busy_interval: float = 0.005
    """Poll interval while events flow (a tick that closed events was written recently)."""
    idle_interval: float = 0.2
    """Longest poll interval when nothing happens (the poll interval doubles up to it)."""
    linger: float = 1.0
    """Keep polling at ``busy_interval`` this long after the last tick of events (keep-alive
    ticks do not count) before backing off."""
    sleep_max: float = 10.0
    """Longest sleep of an idle ticker.  ``linger`` after the last tick of events, with nothing
    to tick, the daemon stops polling and waits for a send's NOTIFY (sends notify only while it
    sleeps) or its next keep-alive, at most this long; ``0`` turns sleeping off (the pace backs
    off to a poll every ``idle_interval``)."""
    maint_interval: float = 0.5
    """How often to ask ``maint_operations()`` and run the retry/delayed pump."""
    maint_idle_interval: float = 5.0
    """Pause of maintenance while the ticker sleeps and a pass found nothing to do, ended early
    when anything gives the daemon work (a send, a nack, a new schedule) or when a retry, delayed
    send, schedule, rotation or silent worker's release falls due (``maint_next_due()``).
    Pruning and the metadata switches may wait this long."""
    rotate_interval: float = 5.0
    """How often to attempt rotation step 1 and pruning of each queue."""
    check_interval: float = 60.0
    """How often to re-run the restore check and record the txid seen (``ticker_check``)."""
    standby_retry: float = 1.0
    """A standby ticker tries to take the lock this often."""
    backoff_min: float = 0.5
    backoff_max: float = 30.0
    """Reconnect delays: doubling from ``backoff_min`` up to ``backoff_max``."""
    connect_timeout: float = 5.0
    tick_statement_timeout: float = 10.0
    maint_statement_timeout: float = 30.0
    maint_lock_timeout: float = 1.0
    tick_synchronous_commit: str = "off"
    """``synchronous_commit`` of the ticking connection.  ``off`` saves a WAL flush per tick and is
    safe: WAL is replayed in order, so any transaction that depends on a tick durably (a
    consumer's receive or ack, which commit normally) flushes the tick's commit with its own; a
    tick lost in a crash before that is simply written again with a newer snapshot."""
    log_level: str = "INFO"
    log_format: str = "kv"
    """``kv`` (key=value lines) or ``json`` (one JSON object per line)."""
    metrics_port: int | None = None
    metrics_host: str = "127.0.0.1"
    application_name: str = "pglogq-ticker"
    maintenance: bool = True
    """Run maintenance (pump, rotation, pruning) while active; off only for special setups."""

    def __post_init__(self) -> None:
        if self.busy_interval <= 0 or self.idle_interval < self.busy_interval:
            raise ValueError("intervals: need 0 < busy interval <= idle interval")
        if self.backoff_min <= 0 or self.backoff_max < self.backoff_min:
            raise ValueError("backoff: need 0 < backoff_min <= backoff_max")
        if self.log_format not in ("kv", "json"):
            raise ValueError(f"log format must be kv or json, not {self.log_format!r}")
        if self.tick_synchronous_commit not in ("on", "off", "local", "remote_write", "remote_apply"):
            raise ValueError(f"not a synchronous_commit value: {self.tick_synchronous_commit!r}")
        if self.metrics_port is not None and not 0 <= self.metrics_port <= 65535:
            raise ValueError(f"metrics port out of range: {self.metrics_port}")

    def with_(self, **changes: Any) -> Settings:
        return replace(self, **changes)


_DURATIONS = {f.name for f in fields(Settings) if f.type == "float"}


def _truthy(text: str) -> bool:
    if text.strip().lower() in ("1", "true", "yes", "on"):
        return True
    if text.strip().lower() in ("0", "false", "no", "off"):
        return False
    raise ValueError(f"not a boolean: {text!r}")


def env_name(setting: str) -> str:
    return ENV_PREFIX + setting.upper()


OPTION_ALIASES = {"interval": "busy_interval", "max_backoff": "backoff_max"}
"""Command-line option names (``--interval``, ``--max-backoff``) that differ from their setting's."""
NOT_SETTINGS = {"ENV_FILE"}
"""``PGLOGQ_TICKER_ENV_FILE`` names the env file (read by the command, not a setting)."""


def env_names() -> dict[str, str]:
    """Every accepted ``PGLOGQ_TICKER_*`` variable → the setting it sets."""
    out = {env_name(f.name): f.name for f in fields(Settings) if f.name != "dsns"}
    out.update({env_name(alias): name for alias, name in OPTION_ALIASES.items()})
    return out


def check_env_names(merged: Mapping[str, str]) -> None:
    """Refuse a ``PGLOGQ_TICKER_*`` variable that names no setting, saying what it might mean."""
    import difflib

    known = env_names()
    for key in sorted(merged):
        if not key.startswith(ENV_PREFIX) or key in known or key[len(ENV_PREFIX):] in NOT_SETTINGS:
            continue
        close = difflib.get_close_matches(key, list(known), n=1, cutoff=0.6)
        hint = f"did you mean {close[0]}?" if close else "see pglogq-ticker --help for the names"
        raise ValueError(f"unknown setting {key}: {hint}")


def describe(settings: Settings) -> dict[str, Any]:
    """The effective settings as text (durations in pglogq's one format, DSNs without password),
    for the start-up log line."""
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    from pglogq.durations import format_duration

    out: dict[str, Any] = {}
    for f in fields(Settings):
        value = getattr(settings, f.name)
        if f.name == "dsns":
            shown = []
            for d in value:
                try:
                    parts = {k: v for k, v in conninfo_to_dict(d).items() if k != "password" and v is not None}
                    shown.append(make_conninfo("", **parts))
                except Exception:
                    shown.append("<unparsable DSN>")
            out["databases"] = " | ".join(shown)
        elif f.name in _DURATIONS:
            out[f.name] = format_duration(value)
        else:
            out[f.name] = str(value)
    return out


def read_env_file(path: str | Path) -> dict[str, str]:
    """``KEY=VALUE`` lines (``#`` comments, optional quotes, optional ``export``), as systemd's
    ``EnvironmentFile=`` reads them."""
    out: dict[str, str] = {}
    for number, raw in enumerate(Path(path).read_text(encoding="utf-8").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith(("#", ";")):
            continue
        if line.startswith("export "):
            line = line[len("export ") :].strip()
        key, sep, value = line.partition("=")
        if not sep or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key.strip()):
            raise ValueError(f"{path}:{number}: expected KEY=VALUE")
        value = value.strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[key.strip()] = value
    return out


def load_settings(
    cli: Mapping[str, Any] | None = None,
    env: Mapping[str, str] | None = None,
    *,
    env_file: str | Path | None = None,
    resolve_default_dsn: bool = True,
) -> Settings:
    """Settings from command-line values (``None`` = not given), an env file and the environment."""
    cli = dict(cli or {})
    merged: dict[str, str] = dict(os.environ if env is None else env)
    if env_file:
        merged.update(read_env_file(env_file))
    check_env_names(merged)
    aliases = {name: alias for alias, name in OPTION_ALIASES.items()}
    values: dict[str, Any] = {}
    for f in fields(Settings):
        if f.name == "dsns":
            continue
        given = cli.get(f.name)
        if given is None and env_name(f.name) in merged:
            given = merged[env_name(f.name)]
        if given is None and f.name in aliases and env_name(aliases[f.name]) in merged:
            given = merged[env_name(aliases[f.name])]
        if given is None:
            continue
        if f.name in _DURATIONS:
            values[f.name] = parse_duration(given)
        elif f.name == "metrics_port":
            values[f.name] = int(given)
        elif f.name == "maintenance":
            values[f.name] = given if isinstance(given, bool) else _truthy(str(given))
        elif f.name == "log_level":
            values[f.name] = str(given).upper()
        else:
            values[f.name] = str(given)
    dsns = tuple(d for d in (cli.get("dsns") or ()) if d)
    where = "--dsn"
    if not dsns and merged.get("PGLOGQ_DSN"):
        dsns, where = (merged["PGLOGQ_DSN"],), "PGLOGQ_DSN"
    for d in dsns:
        check_dsn(d, where)
    if not dsns and resolve_default_dsn:
        from pglogq.dsn import resolve_dsn

        dsns = (resolve_dsn(None),)
    return Settings(dsns=dsns, **values)
