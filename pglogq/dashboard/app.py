"""The dashboard's ASGI app: pages, live fragments and actions (see :func:`create_app`)."""

from __future__ import annotations

import dataclasses
import logging
import os
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import jinja2
from starlette.applications import Starlette
from starlette.datastructures import FormData
from starlette.requests import Request
from starlette.responses import HTMLResponse, RedirectResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.templating import Jinja2Templates

from pglogq import AsyncClient
from pglogq.dashboard.sampler import Sampler, Snapshot, sparkline
from pglogq.dashboard.security import SESSION_COOKIE, SESSION_SECONDS, Auth, Session, bearer, same_origin
from pglogq.errors import NotFound, PglogqError, UnknownQueue
from pglogq.health import Thresholds

DASH = "\u2013"  # an en dash: no value
HERE = Path(__file__).resolve().parent
ACTION_LOG = logging.getLogger("pglogq.dashboard.actions")
log = logging.getLogger("pglogq.dashboard")

DLQ_PAGE = 50
PREVIEW_CHARS = 2000
ACTIONS = ("replay", "replay_all", "purge", "cancel", "pause", "resume", "seek")


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Dashboard:
    client: AsyncClient
    own_client: bool
    actions: bool
    auth: Auth
    sampler: Sampler
    templates: Jinja2Templates
    refresh: float


# -- formatting (Jinja filters) ----------------------------------------------------------------


def fmt_duration(value: timedelta | float | None) -> str:
    if value is None:
        return DASH
    s = value.total_seconds() if isinstance(value, timedelta) else float(value)
    if s < 0:
        s = 0.0
    if s < 10:
        return f"{s:.1f} s"
    if s < 120:
        return f"{int(s)} s"
    if s < 7200:
        return f"{int(s // 60)} min {int(s % 60)} s"
    if s < 172800:
        return f"{int(s // 3600)} h {int(s % 3600 // 60)} min"
    return f"{int(s // 86400)} d"


def fmt_ago(value: datetime | None) -> str:
    if value is None:
        return "never"
    return fmt_duration(datetime.now(timezone.utc) - value) + " ago"


def fmt_time(value: datetime | None) -> str:
    return DASH if value is None else value.astimezone(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def fmt_until(value: datetime | None) -> str:
    """A due time as how far off it is ("in 5 min 3 s"; "due 2.0 s ago" once it has passed)."""
    if value is None:
        return DASH
    left = value - datetime.now(timezone.utc)
    if left.total_seconds() >= 0:
        return "in " + fmt_duration(left)
    return "due " + fmt_duration(-left) + " ago"


def fmt_num(value: float | int | None) -> str:
    if value is None:
        return DASH
    if isinstance(value, float) and not value.is_integer():
        return f"{value:,.1f}"
    return f"{int(value):,}"


def fmt_size(value: int | None) -> str:
    if value is None:
        return DASH
    size = float(value)
    for unit in ("B", "kB", "MB", "GB"):
        if size < 1024 or unit == "GB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1024
    return f"{size:.1f} TB"


def fmt_cell(value: object) -> str:
    """Any value of a lookup row, as text (Jinja escapes it)."""
    if value is None:
        return DASH
    if isinstance(value, datetime):
        return fmt_time(value)
    if isinstance(value, timedelta):
        return fmt_duration(value)
    if isinstance(value, float):
        return fmt_num(value)
    return str(value)


def make_templates() -> Jinja2Templates:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"), autoescape=True, undefined=jinja2.StrictUndefined,
        trim_blocks=True, lstrip_blocks=True,
    )
    env.filters.update(duration=fmt_duration, ago=fmt_ago, time=fmt_time, until=fmt_until, num=fmt_num,
                       size=fmt_size, cell=fmt_cell)
    env.globals["sparkline"] = sparkline
    return Jinja2Templates(env=env)


# -- the app -----------------------------------------------------------------------------------


def create_app(
    dsn_or_client: str | AsyncClient | None,
    actions: bool = False,
    token: str | Mapping[str, str] | None = None,
    *,
    refresh: float = 2.0,
    sample_interval: float | None = None,
    thresholds: Thresholds | None = None,
) -> Starlette:
    """The dashboard as an ASGI app (Starlette), to serve with uvicorn or mount in another app.

    ``dsn_or_client``: a DSN (the app makes its own :class:`AsyncClient` and closes it when the
    app's lifespan ends; ``None`` follows the DSN rule) or an :class:`AsyncClient` of yours.
    ``actions``: allow the actions (replay, purge, cancel, pause/resume, seek); they need
    ``token`` (one token, or ``{"operator name": "token", ...}``; the name is logged with each
    action).  ``refresh``: seconds between the live updates of an open page.
    """
    auth = Auth.from_option(token)
    if actions and not auth.tokens:
        raise ValueError("actions=True needs a token: actions are never open to anyone who can reach the page")
    if isinstance(dsn_or_client, AsyncClient):
        client, own = dsn_or_client, False
    else:
        client, own = AsyncClient(dsn_or_client, min_size=0, max_size=4), True
    if refresh <= 0:
        raise ValueError("refresh must be a positive number of seconds")
    sampler = Sampler(client, interval=sample_interval if sample_interval is not None else min(refresh, 2.0),
                      thresholds=thresholds)
    dash = Dashboard(client, own, actions, auth, sampler, make_templates(), refresh)

    @asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        if dash.own_client:
            await dash.client.close()

    def page(fn: Callable[[Request, Dashboard], Awaitable[Response]]) -> Callable[[Request], Awaitable[Response]]:
        async def endpoint(request: Request) -> Response:
            started = time.perf_counter()
            try:
                response = await fn(request, dash)
            except Refused as exc:
                response = render(request, dash, "message.html", {"title": "Refused", "message": exc.message},
                                  status=exc.status)
            except NotFound as exc:
                response = render(request, dash, "message.html", {"title": "Not found", "message": exc.message},
                                  status=404)
            except PglogqError as exc:
                response = render(request, dash, "message.html", {"title": "Refused by pglogq",
                                                                  "message": exc.message}, status=400)
            # the server's time for the page (the browser's devtools show it; the measure script reads it)
            response.headers["Server-Timing"] = f"app;dur={(time.perf_counter() - started) * 1000:.1f}"
            response.headers.setdefault("Cache-Control", "no-store")
            response.headers.setdefault("X-Content-Type-Options", "nosniff")
            response.headers.setdefault("X-Frame-Options", "DENY")
            response.headers.setdefault("Referrer-Policy", "same-origin")
            response.headers.setdefault(
                "Content-Security-Policy",
                "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; "
                "frame-ancestors 'none'; form-action 'self'; base-uri 'none'",
            )
            return response

        endpoint.__name__ = fn.__name__
        return endpoint

    routes = [
        Route("/", page(overview), name="overview"),
        Route("/queues/{queue}", page(queue_page), name="queue"),
        Route("/queues/{queue}/dlq", page(dlq_page), name="dlq"),
        Route("/queues/{queue}/dlq/confirm", page(dlq_confirm), name="dlq_confirm"),
        Route("/queues/{queue}/dlq/{dead_id:int}", page(dlq_text), name="dlq_text"),
        Route("/queues/{queue}/seek", page(seek_page), name="seek"),
        Route("/lookup", page(lookup_page), name="lookup"),
        Route("/login", page(login_page), methods=["GET", "POST"], name="login"),
        Route("/logout", page(logout), methods=["POST"], name="logout"),
        Route("/actions/{op}", page(action), methods=["POST"], name="action"),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    app = Starlette(routes=routes, lifespan=lifespan)
    app.state.dashboard = dash
    return app


def render(request: Request, dash: Dashboard, template: str, context: dict[str, Any], *, status: int = 200,
           fragment: str | None = None) -> HTMLResponse:
    """A page; an htmx poll (``HX-Request``) gets only ``fragment`` (the live part) when given."""
    session = dash.auth.session(request)
    ctx = {
        "actions": dash.actions,
        "who": session.who if session else None,
        "csrf": session.csrf if session else "",
        "refresh": dash.refresh,
        "now": datetime.now(timezone.utc),
        **context,
    }
    name = fragment if fragment and request.headers.get("hx-request") else template
    response: HTMLResponse = dash.templates.TemplateResponse(request, name, ctx, status_code=status)
    return response


def _queue_arg(value: str | None) -> str | None:
    value = (value or "").strip()
    return value or None


def _int_arg(value: str | None, what: str) -> int | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        return int(value)
    except ValueError:
        raise Refused(400, f"{what} must be a whole number, not {value[:40]!r}") from None


def _minutes_arg(value: str | None) -> timedelta | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        minutes = float(value)
    except ValueError:
        raise Refused(400, f"age must be a number of minutes, not {value[:40]!r}") from None
    if not 0 <= minutes <= 1e7:
        raise Refused(400, "age must be between 0 and 10,000,000 minutes")
    return timedelta(minutes=minutes)


# -- pages -------------------------------------------------------------------------------------


async def overview(request: Request, dash: Dashboard) -> Response:
    snap = await dash.sampler.snapshot()
    return render(request, dash, "overview.html", {"snap": snap, "s": dash.sampler}, fragment="_overview.html")


async def queue_page(request: Request, dash: Dashboard) -> Response:
    name = request.path_params["queue"]
    snap = await dash.sampler.snapshot()
    info = snap.queue(name)
    if info is None:
        snap = await dash.sampler.snapshot(fresh=True)
        info = snap.queue(name)
        if info is None:
            raise UnknownQueue(f'unknown queue "{name}"')
    consumers = [c for c in snap.consumers if c.queue_name == name]
    in_flight = [f for f in snap.in_flight if f.queue_name == name]
    workers: dict[tuple[str, str], list[Any]] = {}
    for f in in_flight:
        workers.setdefault((f.consumer_name, f.worker or "(consumer itself)"), []).append(f)
    # read on every render, not sampled: few rows, and a schedule just added shows at once
    schedules = await dash.client.schedule_list(name)
    # the leases of its share consumers, likewise read on every render (who holds what changes fast)
    leases = await dash.client.leases(name) if any(c.share for c in consumers) else []
    return render(request, dash, "queue.html", {
        "snap": snap, "s": dash.sampler, "q": info, "consumers": consumers, "in_flight": in_flight,
        "schedules": schedules, "leases": leases,
        "workers": workers, "warnings": [w for w in snap.warnings if w.queue == name],
        "stored": snap.stored.get(name), "silent_after": dash.sampler.thresholds.silent_after,
    }, fragment="_queue.html")


def _dlq_filters(request: Request) -> dict[str, Any]:
    p = request.query_params
    return {
        "consumer": _queue_arg(p.get("consumer")),
        "type": (p.get("type") or None),
        "older_than": _minutes_arg(p.get("age")),
        "search": (p.get("text") or None),
    }


async def dlq_page(request: Request, dash: Dashboard) -> Response:
    name = request.path_params["queue"]
    f = _dlq_filters(request)
    before = _int_arg(request.query_params.get("before"), "before")
    total = await dash.client.dlq_count(name, f["consumer"], type=f["type"], older_than=f["older_than"])
    if request.headers.get("hx-request"):  # the live part: the count (the list stays as the operator reads it)
        return render(request, dash, "_dlq_count.html", {"queue": name, "total": total, "f": f,
                                                          "raw": request.query_params})
    rows = await dash.client.dlq_search(name, f["consumer"], type=f["type"], older_than=f["older_than"],
                                        search=f["search"], before=before, limit=DLQ_PAGE,
                                        preview_chars=PREVIEW_CHARS)
    consumers = [c.consumer_name for c in await dash.client.consumer_info(name)]
    return render(request, dash, "dlq.html", {
        "queue": name, "rows": rows, "total": total, "f": f, "consumers": consumers,
        "raw": request.query_params, "before": before,
        "next_before": rows[-1].dead_id if len(rows) == DLQ_PAGE else None,
    })


async def dlq_text(request: Request, dash: Dashboard) -> Response:
    dead_id = request.path_params["dead_id"]
    payload, headers = await dash.client.dlq_text(dead_id)
    return render(request, dash, "dlq_text.html", {
        "queue": request.path_params["queue"], "dead_id": dead_id, "payload": payload, "headers": headers,
    }, fragment="_dlq_text.html")


async def dlq_confirm(request: Request, dash: Dashboard) -> Response:
    name = request.path_params["queue"]
    op = request.query_params.get("op", "")
    if op not in ("replay_all", "purge"):
        raise Refused(400, "op must be replay_all or purge")
    f = _dlq_filters(request)
    if f["search"]:
        raise Refused(400, "a text search cannot select a bulk action (the SQL API's bulk actions filter by "
                           "consumer, type and age only): clear the text filter first")
    count = await dash.client.dlq_count(name, f["consumer"], type=f["type"], older_than=f["older_than"])
    return render(request, dash, "dlq_confirm.html", {"queue": name, "op": op, "f": f, "count": count,
                                                       "raw": request.query_params})


async def seek_page(request: Request, dash: Dashboard) -> Response:
    name = request.path_params["queue"]
    p = request.query_params
    consumer = _queue_arg(p.get("consumer"))
    to = (p.get("to") or "").strip() or None
    by_events = _int_arg(p.get("by_events"), "by_events")
    plan = None
    if consumer and (to is not None or by_events is not None):
        target: str | int | None = to
        if to is not None and to.isdigit():
            target = int(to)
        plan = await dash.client.seek_plan(name, consumer, to=target, by_events=by_events)
    consumers = [c.consumer_name for c in await dash.client.consumer_info(name)]
    return render(request, dash, "seek.html", {"queue": name, "consumer": consumer, "to": to or "",
                                                "by_events": "" if by_events is None else by_events,
                                                "plan": plan, "consumers": consumers})


async def lookup_page(request: Request, dash: Dashboard) -> Response:
    p = request.query_params
    queue = _queue_arg(p.get("queue"))
    msg_id = _int_arg(p.get("msg_id"), "message id")
    result: dict[str, Any] | None = None
    queues = [q.queue_name for q in await dash.client.queue_info()]
    if msg_id is not None:
        where = [queue] if queue else queues
        # Client.lookup (where this pglogq has it) tells every consumer's state of the event
        lookup = getattr(dash.client, "lookup", None)
        states: list[dict[str, Any]] = []
        history: list[dict[str, Any]] = []  # every attempt of the consumers' outcome logs
        if lookup is not None:
            for qn in where:
                try:
                    found = await lookup(qn, msg_id)
                except PglogqError:  # not an id of this queue
                    continue
                for item in found if isinstance(found, list) else [found]:
                    is_row = dataclasses.is_dataclass(item) and not isinstance(item, type)
                    row = dataclasses.asdict(item) if is_row else {"state": item}
                    for h in getattr(item, "history", None) or []:
                        history.append({"queue": qn, "consumer": row.get("consumer"), "attempt": h.attempt,
                                         "outcome": h.outcome, "worker": h.worker, "started_at": h.started_at,
                                         "finished_at": h.finished_at, "took": h.duration, "error": h.error})
                    states.append({"queue": qn, **{k: v for k, v in row.items() if k not in ("cursor", "history")}})
        in_flight = [f for f in await dash.client.in_flight(queue) if f.msg_id == msg_id]
        dead = []
        for qn in where:
            dead += await dash.client.dlq_search(qn, msg_id=msg_id, limit=100, preview_chars=PREVIEW_CHARS)
        result = {"msg_id": msg_id, "in_flight": in_flight, "dead": dead, "states": states, "history": history,
                  "has_lookup": lookup is not None}
    return render(request, dash, "lookup.html", {"queue": queue or "", "msg_id": "" if msg_id is None else msg_id,
                                                  "queues": queues, "result": result},
                  fragment="_lookup.html" if msg_id is not None else None)


# -- login and actions -------------------------------------------------------------------------


async def login_page(request: Request, dash: Dashboard) -> Response:
    if not dash.actions:
        raise Refused(403, "this dashboard is read-only (started without --actions): there is nothing to log in to")
    error = None
    if request.method == "POST":
        if not same_origin(request):
            raise Refused(403, "cross-site request refused")
        form = await request.form()
        who = dash.auth.who_has(str(form.get("token") or ""))
        if who is not None:
            sid, _ = dash.auth.login(who)
            nxt = str(form.get("next") or "")
            local = nxt.startswith("/") and not nxt.startswith("//") and "\\" not in nxt  # never another site
            target = nxt if local else str(request.url_for("overview"))
            response = RedirectResponse(target, status_code=303)
            response.set_cookie(SESSION_COOKIE, sid, max_age=SESSION_SECONDS, httponly=True, samesite="strict",
                                secure=request.url.scheme == "https", path=request.scope.get("root_path") or "/")
            log.info("login by %s from %s", who, _client_addr(request))
            return response
        log.warning("failed login from %s", _client_addr(request))
        error = "wrong token"
    return render(request, dash, "login.html", {"error": error, "next": request.query_params.get("next", "")},
                  status=401 if error else 200)


async def logout(request: Request, dash: Dashboard) -> Response:
    if not same_origin(request):
        raise Refused(403, "cross-site request refused")
    dash.auth.logout(request.cookies.get(SESSION_COOKIE))
    response = RedirectResponse(str(request.url_for("overview")), status_code=303)
    response.delete_cookie(SESSION_COOKIE, path=request.scope.get("root_path") or "/")
    return response


def _client_addr(request: Request) -> str:
    return request.client.host if request.client else "unknown"


def authorize(request: Request, dash: Dashboard, form: FormData) -> str:
    """Who is acting, or :class:`Refused` (read-only app, cross-site request, no token, bad CSRF token)."""
    if not dash.actions:
        raise Refused(403, "this dashboard is read-only: start it with --actions (and a token) to act")
    if not same_origin(request):
        raise Refused(403, "cross-site request refused")
    token = bearer(request)
    if token is not None:
        who = dash.auth.who_has(token)
        if who is None:
            raise Refused(401, "wrong token")
        return who
    session: Session | None = dash.auth.session(request)
    if session is None:
        raise Refused(401, "authentication required: log in with the dashboard's token first")
    if not secrets.compare_digest(str(form.get("csrf") or "").encode(), session.csrf.encode()):
        raise Refused(403, "missing or wrong CSRF token: reload the page and try again")
    return session.who


async def action(request: Request, dash: Dashboard) -> Response:
    op = request.path_params["op"]
    form = await request.form()
    who = authorize(request, dash, form)
    if op not in ACTIONS:
        raise Refused(404, "unknown action")
    c = dash.client
    queue = str(form.get("queue") or "")
    details: dict[str, Any] = {"queue": queue}
    back = str(request.url_for("queue", queue=queue)) if queue else str(request.url_for("overview"))
    try:
        if op == "replay":
            dead_id = _int_arg(str(form.get("dead_id") or ""), "dead letter id")
            if dead_id is None:
                raise Refused(400, "dead letter id missing")
            details["dead_id"] = dead_id
            msg_id = await c.dlq_replay(dead_id)
            message = f"dead letter {dead_id} replayed as message {msg_id}"
            back = str(request.url_for("dlq", queue=queue)) if queue else back
        elif op in ("replay_all", "purge"):
            consumer = _queue_arg(str(form.get("consumer") or ""))
            mtype = str(form.get("type") or "") or None
            older = _minutes_arg(str(form.get("age") or ""))
            expected = _int_arg(str(form.get("expected") or ""), "expected count")
            if str(form.get("confirm") or "") != "yes" or expected is None:
                raise Refused(400, "a bulk action needs its confirmation (open it from the dead-letter page)")
            details.update(consumer=consumer, type=mtype, older_than=older, expected=expected)
            if op == "replay_all":
                n = await c.dlq_replay_all(queue, consumer, type=mtype, older_than=older)
                message = f"{n} dead letter(s) replayed (the confirmation counted {expected})"
            else:
                n = await c.dlq_purge(queue, consumer, type=mtype, older_than=older)
                message = f"{n} dead letter(s) purged for good (the confirmation counted {expected})"
            details["done"] = n
            back = str(request.url_for("dlq", queue=queue)) if queue else back
        elif op == "cancel":
            cancel_id = _int_arg(str(form.get("msg_id") or ""), "message id")
            if cancel_id is None:
                raise Refused(400, "message id missing")
            details["msg_id"] = msg_id = cancel_id
            ok = await c.cancel(queue, cancel_id)
            message = (f"message {msg_id} cancelled" if ok else
                       f"message {msg_id} was not cancelled: a consumer has received it already")
            back = str(request.url_for("lookup")) + "?" + urlencode({"queue": queue, "msg_id": msg_id})
        elif op in ("pause", "resume"):
            await c.set_queue_config(queue, "paused", op == "pause")
            message = f"queue {queue} {'paused: no ticks until resumed' if op == 'pause' else 'resumed'}"
        else:  # seek
            consumer = _queue_arg(str(form.get("consumer") or ""))
            to = str(form.get("to") or "").strip() or None
            by_events = _int_arg(str(form.get("by_events") or ""), "by_events")
            if consumer is None:
                raise Refused(400, "consumer missing")
            target: str | int | None = int(to) if to is not None and to.isdigit() else to
            details.update(consumer=consumer, to=to, by_events=by_events)
            plan = await c.seek(queue, consumer, to=target, by_events=by_events, force=form.get("force") == "yes")
            message = (f"consumer {consumer} moved from tick {plan.current_tick} to tick {plan.target_tick}"
                       f" ({plan.delta_events} events)")
    except PglogqError as exc:
        ACTION_LOG.warning("action %s by %s from %s refused: %s %s", op, who, _client_addr(request),
                           exc.message, details)
        raise
    ACTION_LOG.info("action %s by %s from %s: %s %s", op, who, _client_addr(request), message, details)
    await dash.sampler.snapshot(fresh=True)
    return render(request, dash, "message.html", {"title": "Done", "message": message, "back": back})


def token_from_env() -> str | None:
    return os.environ.get("PGLOGQ_DASHBOARD_TOKEN") or None


__all__ = ["Snapshot", "create_app"]
