"""The security sweep of the dashboard: no action without authentication, none in
read-only mode, no cross-site request, no CSRF-less form post, no script injection, no SQL
from input.  Every refused action leaves the database as it was."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from starlette.testclient import TestClient

import pglogq
from pglogq.dashboard import create_app
from tests.support.dashboard import SCRIPT, make_dead_letters

TOKEN = "correct-horse-battery"
OPS: dict[str, dict[str, str]] = {
    "replay": {"dead_id": "1"},
    "replay_all": {"confirm": "yes", "expected": "1"},
    "purge": {"confirm": "yes", "expected": "1"},
    "cancel": {"msg_id": "1"},
    "pause": {},
    "resume": {},
    "seek": {"consumer": "c", "to": "earliest"},
}


@pytest.fixture
def state(client: pglogq.Client) -> dict[str, Any]:
    client.create_queue("q")
    client.subscribe("q", "c")
    ids = make_dead_letters(client, "q", "c", [{"s": SCRIPT}, {"n": 2}], type=SCRIPT, reason=SCRIPT)
    waiting = client.send("q", {"later": True})
    return {"ids": ids, "waiting": waiting}


def snapshot(client: pglogq.Client) -> tuple[Any, ...]:
    """What an action could change: dead letters, paused, cursor, events."""
    q = client.queue_info("q")[0]
    c = client.consumer_info("q", "c")[0]
    return (client.dlq_count("q"), q.paused, c.last_tick, client.stored_events("q"))


@pytest.fixture
def actions_app(dsn: str) -> Iterator[TestClient]:
    with TestClient(create_app(dsn, actions=True, token={"alice": TOKEN})) as tc:
        yield tc


def login(tc: TestClient, token: str = TOKEN) -> str:
    """Log in; returns the session's CSRF token (read from a page's action form)."""
    r = tc.post("/login", data={"token": token}, follow_redirects=False)
    assert r.status_code == 303, r.text
    page = tc.get("/queues/q").text
    m = re.search(r'name="csrf" value="([^"]+)"', page)
    assert m, "no CSRF field in the action forms of a logged-in page"
    return m.group(1)


def form(op: str, csrf: str | None = None) -> dict[str, str]:
    data = {"queue": "q", **OPS[op]}
    if csrf is not None:
        data["csrf"] = csrf
    return data


@pytest.mark.parametrize("op", list(OPS))
def test_read_only_refuses_every_action(dsn: str, client: pglogq.Client, state: dict[str, Any], op: str) -> None:
    before = snapshot(client)
    with TestClient(create_app(dsn)) as tc:
        r = tc.post(f"/actions/{op}", data=form(op), headers={"Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 403
        assert "read-only" in r.text
        assert "csrf" not in tc.get("/queues/q/dlq").text  # no action form shown
        assert tc.get("/login").status_code == 403
    assert snapshot(client) == before


@pytest.mark.parametrize("op", list(OPS))
def test_no_action_without_authentication(actions_app: TestClient, client: pglogq.Client, state: dict[str, Any],
                                          op: str) -> None:
    before = snapshot(client)
    r = actions_app.post(f"/actions/{op}", data=form(op, csrf=""))
    assert r.status_code == 401
    assert "authentication required" in r.text
    r = actions_app.post(f"/actions/{op}", data=form(op), headers={"Authorization": "Bearer wrong-token-123"})
    assert r.status_code == 401
    assert snapshot(client) == before


def test_wrong_token_does_not_log_in(actions_app: TestClient) -> None:
    r = actions_app.post("/login", data={"token": TOKEN + "x"}, follow_redirects=False)
    assert r.status_code == 401
    assert "wrong token" in r.text
    assert "pglogq_dashboard_session" not in r.cookies


@pytest.mark.parametrize("op", list(OPS))
def test_session_action_needs_its_csrf_token(actions_app: TestClient, client: pglogq.Client,
                                             state: dict[str, Any], op: str) -> None:
    csrf = login(actions_app)
    before = snapshot(client)
    for bad in (None, "", csrf[:-1] + ("A" if csrf[-1] != "A" else "B")):
        r = actions_app.post(f"/actions/{op}", data=form(op, csrf=bad))
        assert r.status_code == 403, (bad, r.text)
        assert "CSRF" in r.text
    assert snapshot(client) == before


@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},
    {"Origin": "http://testserver.evil.example"},
    {"Referer": "http://evil.example/page"},
    {"Sec-Fetch-Site": "cross-site"},
])
def test_cross_site_requests_are_refused(actions_app: TestClient, client: pglogq.Client, state: dict[str, Any],
                                         headers: dict[str, str]) -> None:
    csrf = login(actions_app)
    before = snapshot(client)
    for op in OPS:
        # even with a valid session, CSRF token and bearer token
        r = actions_app.post(f"/actions/{op}", data=form(op, csrf=csrf),
                             headers={**headers, "Authorization": f"Bearer {TOKEN}"})
        assert r.status_code == 403, (op, r.text)
        assert "cross-site" in r.text
    r = actions_app.post("/login", data={"token": TOKEN}, headers=headers, follow_redirects=False)
    assert r.status_code == 403
    assert snapshot(client) == before


def test_same_origin_session_action_works_and_is_logged(
    actions_app: TestClient, client: pglogq.Client, state: dict[str, Any], caplog: pytest.LogCaptureFixture
) -> None:
    """The control case: the refusals above are not a dashboard that refuses everything."""
    csrf = login(actions_app)
    dead = client.dlq_search("q", limit=1)[0]
    with caplog.at_level(logging.INFO, logger="pglogq.dashboard.actions"):
        r = actions_app.post("/actions/replay", data={"queue": "q", "dead_id": str(dead.dead_id), "csrf": csrf},
                             headers={"Origin": "http://testserver", "Sec-Fetch-Site": "same-origin"})
    assert r.status_code == 200, r.text
    assert f"dead letter {dead.dead_id} replayed" in r.text
    assert client.dlq_count("q") == 1
    logged = [rec.getMessage() for rec in caplog.records if rec.name == "pglogq.dashboard.actions"]
    assert any("action replay by alice from testclient" in m for m in logged), logged


def test_bearer_token_acts_without_a_session(dsn: str, client: pglogq.Client, state: dict[str, Any],
                                             caplog: pytest.LogCaptureFixture) -> None:
    with TestClient(create_app(dsn, actions=True, token={"alice": TOKEN, "bob": "bobs-token-456"})) as tc, \
            caplog.at_level(logging.INFO, logger="pglogq.dashboard.actions"):
        r = tc.post("/actions/pause", data={"queue": "q"}, headers={"Authorization": "Bearer bobs-token-456"})
    assert r.status_code == 200, r.text
    assert client.queue_info("q")[0].paused
    assert any("action pause by bob" in rec.getMessage() for rec in caplog.records)


@pytest.mark.parametrize("nxt", ["//evil.example/x", "/\\evil.example", "https://evil.example/", "javascript:x"])
def test_login_never_redirects_to_another_site(actions_app: TestClient, nxt: str) -> None:
    r = actions_app.post("/login", data={"token": TOKEN, "next": nxt}, follow_redirects=False)
    assert r.status_code == 303
    assert r.headers["location"] == "http://testserver/"
    assert actions_app.post("/login", data={"token": TOKEN, "next": "/queues/q"},
                            follow_redirects=False).headers["location"] == "/queues/q"


def test_session_cookie_is_httponly_and_samesite_strict(actions_app: TestClient) -> None:
    r = actions_app.post("/login", data={"token": TOKEN}, follow_redirects=False)
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie
    assert "samesite=strict" in cookie


def test_logout_ends_the_session(actions_app: TestClient, client: pglogq.Client, state: dict[str, Any]) -> None:
    csrf = login(actions_app)
    actions_app.post("/logout")
    r = actions_app.post("/actions/pause", data={"queue": "q", "csrf": csrf})
    assert r.status_code == 401
    assert not client.queue_info("q")[0].paused


def test_actions_need_a_token() -> None:
    with pytest.raises(ValueError, match="needs a token"):
        create_app("postgresql://nobody@127.0.0.1:1/x", actions=True)
    with pytest.raises(ValueError, match="at least 8"):
        create_app("postgresql://nobody@127.0.0.1:1/x", actions=True, token="short")


def test_script_in_type_payload_reason_stage_renders_as_text(dsn: str, client: pglogq.Client,
                                                             state: dict[str, Any]) -> None:
    mid = state["ids"][0]
    client.subscribe("q", "w")
    client.tick("q", force=True)
    batch = client.receive("q", "w", worker=None)
    for m in batch:
        client.report_progress(batch.id, m.msg_id, percent=10, stage=SCRIPT, worker=SCRIPT)  # type: ignore[arg-type]
    with TestClient(create_app(dsn, actions=True, token=TOKEN)) as tc:
        pages = {
            "dlq": tc.get("/queues/q/dlq").text,
            "dlq search": tc.get("/queues/q/dlq", params={"text": SCRIPT}).text,
            "dlq text": tc.get(f"/queues/q/dlq/{client.dlq_search('q', msg_id=mid)[0].dead_id}").text,
            "lookup": tc.get("/lookup", params={"queue": "q", "msg_id": str(mid)}).text,
            "queue": tc.get("/queues/q").text,
            "overview": tc.get("/").text,
            "login next": tc.get("/login", params={"next": SCRIPT}).text,
        }
        assert tc.get("/").headers["content-security-policy"].startswith("default-src 'self'")
    for name, html in pages.items():
        assert "<script>alert" not in html, name
        assert "alert(&#39;pwned&#39;)" in html or name in ("overview", "login next"), name
    assert "&lt;script&gt;alert(&#39;pwned&#39;)&lt;/script&gt;" in pages["dlq"]
    assert "&lt;script&gt;" in pages["queue"]  # the stage and the worker label


def test_input_reaches_sql_only_as_parameters(dsn: str, client: pglogq.Client, state: dict[str, Any]) -> None:
    evil = "x'); DROP TABLE pglogq.queue; --"
    with TestClient(create_app(dsn)) as tc:
        assert tc.get("/queues/q/dlq", params={"text": evil, "type": evil}).status_code == 200
        assert tc.get("/queues/q/dlq", params={"consumer": evil}).status_code in (400, 404)
        assert tc.get("/queues/q/dlq", params={"age": evil}).status_code == 400
        assert tc.get("/queues/q/seek", params={"consumer": "c", "to": evil}).status_code == 400
        assert tc.get("/lookup", params={"msg_id": evil}).status_code == 400
        assert tc.get(f"/queues/{evil}").status_code in (400, 404)
    assert client.queue_info("q")  # still there
