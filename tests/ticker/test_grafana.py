"""The Grafana dashboard and the alert rules shipped with the ticker (ticker/) query only
metrics the daemon exports: a running ``pglogq-ticker`` is scraped and every metric
name in every query must be among its series; the rule file is the one the docs show."""

from __future__ import annotations

import json
import re
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml

import pglogq
from tests.support.tickers import Daemon, free_port
from tests.support.waiting import wait_for

ROOT = Path(__file__).resolve().parents[2]
GRAFANA = ROOT / "ticker" / "grafana-dashboard.json"
ALERTS = ROOT / "ticker" / "prometheus-alerts.yml"
METRIC = re.compile(r"\bpglogq_[a-z_]+\b")


def grafana_exprs() -> list[str]:
    doc = json.loads(GRAFANA.read_text())
    exprs = [t["expr"] for p in doc["panels"] for t in p.get("targets", [])]
    exprs += [v["query"] for v in doc["templating"]["list"] if v["type"] == "query"]
    return exprs


def alert_exprs() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [r["expr"] for g in rules["groups"] for r in g["rules"]]


def test_the_scan_finds_metric_names() -> None:
    assert METRIC.findall('sum by (database) (rate(pglogq_ticker_ticks_total{database=~"$d"}[5m]))') == [
        "pglogq_ticker_ticks_total"]
    assert len(grafana_exprs()) > 20 and len(alert_exprs()) >= 5


def test_alert_rules_are_the_documented_ones() -> None:
    md = (ROOT / "docs" / "how-to" / "monitoring.md").read_text()
    block = re.search(r"```yaml\n(groups:.*?)```", md, re.S)
    assert block
    assert yaml.safe_load(block.group(1)) == yaml.safe_load(ALERTS.read_text())


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[Callable[..., Daemon]]:
    made: list[Daemon] = []

    def start(*args: str) -> Daemon:
        d = Daemon(tmp_path / f"d{len(made)}.log", *args)
        made.append(d)
        return d

    yield start
    for d in made:
        d.close()


def test_every_queried_metric_is_exported(dsn: str, client: pglogq.Client, daemon: Callable[..., Daemon]) -> None:
    client.create_queue("q")
    client.subscribe("q", "c")
    client.send("q", {"x": 1})
    client.tick("q", force=True)
    batch = client.receive("q", "c", worker="w1")  # an event in flight: the worker series exist
    assert batch.id is not None
    client.report_progress(batch.id, batch.messages[0].msg_id, percent=50, worker="w1")
    client.create_queue("sq")  # a share consumer holding a lease: the share series exist
    client.subscribe("sq", "sc", share=True)
    client.send("sq", {"x": 1})
    client.tick("sq", force=True)
    assert client.receive("sq", "sc", worker="w2").messages
    port = free_port()
    daemon("--dsn", dsn, "--metrics-port", str(port), "--maint-interval", "100ms", "--rotate-interval", "200ms")

    def scrape() -> str:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
                text: str = r.read().decode()
                return text
        except OSError:
            return ""

    def complete() -> str:
        t = scrape()
        series = ("pglogq_ticker_maintenance_steps_total{", "pglogq_consumer_lag_seconds{",
                  "pglogq_worker_silent_seconds{", "pglogq_share_delivery_count_bucket{")
        return t if all(s in t for s in series) else ""

    text = wait_for(complete, "every series")
    # the share consumer's lease: one event in flight, first delivery, not expired; the ordinary
    # consumer has no share series
    share = {line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
             for line in text.splitlines() if line.startswith("pglogq_share_")}
    db = re.search(r'pglogq_share_in_flight\{consumer="sc",database="([^"]*)"', text)
    assert db, text
    lab = f'consumer="sc",database="{db.group(1)}"'
    assert share[f'pglogq_share_in_flight{{{lab},queue="sq"}}'] == 1.0
    assert share[f'pglogq_share_expired_leases{{{lab},queue="sq"}}'] == 0.0
    assert share[f'pglogq_share_redelivered_events{{{lab},queue="sq"}}'] == 0.0
    assert share[f'pglogq_share_delivery_count_bucket{{{lab},le="1",queue="sq"}}'] == 1.0
    assert share[f'pglogq_share_delivery_count_gsum{{{lab},queue="sq"}}'] == 1.0
    assert not [k for k in share if 'consumer="c"' in k]
    exported = set(re.findall(r"^(pglogq_[a-z_]+)[{ ]", text, re.M))
    queried = {m for e in grafana_exprs() + alert_exprs() for m in METRIC.findall(e)}
    assert queried, "no metric found in the queries"
    assert sorted(queried - exported) == []
    unused = {m for m in exported if not m.endswith("_created")} - queried
    assert sorted(unused) == [], "a series the dashboard does not show"
