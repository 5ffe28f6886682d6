"""The dashboard's main journeys in a real browser: Debian's Chromium, driven by
Playwright (never a downloaded browser).  htmx updates the pages live; the tests follow them.

Each journey builds its state through the client, serves the app with uvicorn on a free port
and acts as an operator would: click, read, submit.  No alert dialog may ever open (a payload or
type holding a script must show as text)."""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.responses import HTMLResponse
from starlette.routing import Route

import pglogq
from pglogq.dashboard import Thresholds, create_app
from tests.support.dashboard import CHROMIUM, SCRIPT, LongJob, make_dead_letters, make_stuck_consumer, serve

if not Path(CHROMIUM).exists():
    if os.environ.get("CI"):
        raise RuntimeError(f"{CHROMIUM} is missing: .ci/run installs Debian's chromium package")
    pytest.skip(f"{CHROMIUM} is not installed (apt-get install -y chromium)", allow_module_level=True)

from playwright.sync_api import Browser, Dialog, Page, expect, sync_playwright

TOKEN = "journey-token-0123"
FAST = {"refresh": 0.3, "sample_interval": 0.1,
        "thresholds": Thresholds(stuck_after=timedelta(seconds=1), silent_after=timedelta(seconds=30))}


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, headless=True)
        yield b
        b.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    context = browser.new_context(viewport={"width": 1400, "height": 900})
    pg = context.new_page()
    pg.set_default_timeout(20_000)
    dialogs: list[str] = []

    def on_dialog(d: Dialog) -> None:
        dialogs.append(d.message)
        d.dismiss()

    pg.on("dialog", on_dialog)
    # errors in the page's console: a Content-Security-Policy violation, a script error (htmx's
    # requests answered 401/403/404 on purpose are not errors of the page, nor a poll that finds
    # the test's server stopped at the end: htmx logs those as htmx:sendError / afterRequest /
    # responseError; a request the journey needs and that fails shows in its expectations)
    errors: list[str] = []
    benign = ("Failed to load resource", "htmx:sendError", "htmx:afterRequest", "htmx:responseError")
    pg.on("console", lambda m: errors.append(m.text) if m.type == "error" and not m.text.startswith(benign)
          else None)
    pg.on("pageerror", lambda exc: errors.append(str(exc)))
    yield pg
    context.close()
    assert dialogs == [], f"a script ran in the page: {dialogs}"
    assert errors == [], errors


def log_in(page: Page, base: str, token: str = TOKEN) -> None:
    page.goto(f"{base}/login")
    page.fill("input[name=token]", token)
    page.click("button[type=submit]")
    expect(page.locator("header .mode")).to_contain_text("signed in as")


def test_find_a_stuck_consumer(dsn: str, client: pglogq.Client, page: Page) -> None:
    client.create_queue("orders")
    client.subscribe("orders", "billing")
    make_stuck_consumer(client, "orders", "mailer")
    for batch in iter(lambda: client.receive("orders", "billing"), None):  # billing keeps up
        if not batch:
            break
        batch.ack()
    with serve(create_app(dsn, **FAST)) as base:
        page.goto(base)
        warning = page.locator("li.warning[data-kind=consumer_stale]")
        expect(warning).to_contain_text("consumer mailer on orders is stuck")  # appears live (htmx)
        expect(page.locator("li.warning[data-kind=consumer_stale]", has_text="billing")).to_have_count(0)
        warning.locator("a").click()
        expect(page).to_have_url(re.compile(r"/queues/orders$"))
        row = page.locator("tr[data-consumer=mailer]")
        expect(row).to_be_visible()
        expect(row.locator("td").nth(7)).to_have_text("1")  # its open batch
        expect(page.locator("#warnings")).to_contain_text("mailer")


def test_inspect_and_replay_a_dead_letter(dsn: str, client: pglogq.Client, page: Page) -> None:
    client.create_queue("payments")
    client.subscribe("payments", "charger")
    (evil_id,) = make_dead_letters(client, "payments", "charger", [{"card": SCRIPT}], type=SCRIPT,
                                   reason="card declined: " + SCRIPT)
    (big_id,) = make_dead_letters(client, "payments", "charger", [{"blob": "x" * 6000}], type="big.upload",
                                  headers={"trace": "abc-123"})
    with serve(create_app(dsn, actions=True, token={"alice": TOKEN}, **FAST)) as base:
        log_in(page, base)
        page.goto(f"{base}/queues/payments/dlq")
        expect(page.locator("#dlq-count")).to_contain_text("2 dead letter(s)")
        # the large one: a preview, then all of it
        big = page.locator(f"article.dead:has(a:text-is('{big_id}'))")
        big.locator("summary").click()
        expect(big.locator("pre.payload")).to_contain_text('"blob"')
        expect(big.locator("pre.headers")).to_contain_text('"trace": "abc-123"')
        expect(big.locator("p.truncated")).to_contain_text("cut at 2,000 characters")
        big.locator("a.load-all").click()
        expect(big.locator("pre.payload.full")).to_be_visible()
        assert len(big.locator("pre.payload.full").inner_text()) > 6000
        # find the other by its text: script shown as text, never run
        page.fill("input[name=text]", "declined")
        page.click("#filters button[type=submit]")
        articles = page.locator("article.dead")
        expect(articles).to_have_count(1)
        evil = articles.first
        expect(evil.locator("code.type")).to_have_text(SCRIPT)
        expect(evil.locator("p.reason")).to_have_text("reason: card declined: " + SCRIPT)
        evil.locator("summary").click()
        expect(evil.locator("pre.payload")).to_contain_text(f'"card": "{SCRIPT}"'.replace("'", "'"))
        evil.locator("button.replay").click()
        expect(page.locator("#message")).to_contain_text("replayed as message")
    assert client.dlq_count("payments") == 1
    client.tick("payments", force=True)
    again = client.receive("payments", "charger")
    assert [m.payload for m in again] == [{"card": SCRIPT}]
    assert evil_id != big_id


def test_follow_a_long_job_to_completion(dsn: str, client: pglogq.Client, page: Page) -> None:
    client.create_queue("reports")
    job = LongJob(dsn, "reports", "builder", steps=4, stepped=True).start()
    with serve(create_app(dsn, **FAST)) as base:
        page.goto(f"{base}/queues/reports")
        expect(page.locator("#no-in-flight")).to_be_visible()
        seen = []
        for step in range(job.steps + 1):
            job.step()
            pct = 100 * step // job.steps
            row = page.locator(f"tr[data-msg-id='{job.msg_id}']")
            expect(row.locator("progress")).to_have_attribute("value", re.compile(rf"^{pct}(\.0)?$"))
            expect(row.locator("td.stage")).to_have_text(f"step {step} of {job.steps}")
            seen.append(row.locator("span.pct").inner_text())
        job.step()  # acknowledge
        job.join()
        expect(page.locator("#no-in-flight")).to_be_visible()
    assert seen == ["0 %", "25 %", "50 %", "75 %", "100 %"]


def test_look_up_a_job_by_id(dsn: str, client: pglogq.Client, page: Page) -> None:
    client.create_queue("mail")
    client.subscribe("mail", "sender")
    (dead,) = make_dead_letters(client, "mail", "sender", [{"to": "a@example.com"}], type="mail.send",
                                reason="smtp 550")
    job = LongJob(dsn, "mail", "digest", steps=2, stepped=True).start()
    job.step()
    with serve(create_app(dsn, **FAST)) as base:
        page.goto(f"{base}/lookup")
        page.select_option("select[name=queue]", "mail")
        page.fill("input[name=msg_id]", str(dead))
        page.click("#lookup-form button[type=submit]")
        expect(page.locator("#lookup-dead")).to_contain_text("smtp 550")
        expect(page.locator("#lookup-dead")).to_contain_text("a@example.com")
        expect(page.locator("#not-in-flight")).to_be_visible()
        # a running one, in any queue
        page.select_option("select[name=queue]", "")
        page.fill("input[name=msg_id]", str(job.msg_id))
        page.click("#lookup-form button[type=submit]")
        expect(page.locator(f"#lookup-result tr[data-msg-id='{job.msg_id}'] td.stage")).to_have_text("step 0 of 2")
        job.step()  # the page follows it
        expect(page.locator(f"#lookup-result tr[data-msg-id='{job.msg_id}'] td.stage")).to_have_text("step 1 of 2")
        job.step()
        job.step()
        job.join()
        expect(page.locator("#not-in-flight")).to_be_visible()


def _other_site(target: str) -> Starlette:
    async def evil(_: Any) -> HTMLResponse:
        return HTMLResponse(f"""<!doctype html><form id=f method=post action="{target}/actions/pause">
            <input name=queue value=jobs><input name=csrf value=guess><button id=go>win a prize</button></form>""")

    return Starlette(routes=[Route("/", evil)])


def test_refuse_an_action_without_a_token(dsn: str, client: pglogq.Client, page: Page) -> None:
    client.create_queue("jobs")
    client.subscribe("jobs", "runner")
    make_dead_letters(client, "jobs", "runner", [{"n": 1}])
    with serve(create_app(dsn, actions=True, token={"alice": TOKEN}, **FAST)) as base:
        # not logged in: the button is there, the action is refused
        page.goto(f"{base}/queues/jobs/dlq")
        expect(page.locator("header .mode")).to_contain_text("log in")
        expect(page.locator("#dlq-count")).to_contain_text("1 dead letter(s)")
        make_dead_letters(client, "jobs", "runner", [{"n": 2}])
        expect(page.locator("#dlq-count")).to_contain_text("2 dead letter(s)")  # live, no reload
        page.locator("button.replay").first.click()
        expect(page.locator("#message")).to_contain_text("authentication required")
        # a wrong token does not log in
        page.goto(f"{base}/login")
        page.fill("input[name=token]", "not-the-token")
        page.click("button[type=submit]")
        expect(page.locator("#login-error")).to_have_text("wrong token")
        # logged in, a form on another site cannot act with the operator's session
        log_in(page, base)
        other = base.replace("127.0.0.1", "localhost")
        with serve(_other_site(base)) as evil_base:
            page.goto(evil_base.replace("127.0.0.1", "localhost"))
            page.click("#go")
            expect(page.locator("#message")).to_contain_text("cross-site request refused")
        assert other != base
    assert client.dlq_count("jobs") == 2
    assert not client.queue_info("jobs")[0].paused
