"""Who may act on the dashboard: tokens, sessions, CSRF tokens and the same-origin check.

* **Read-only** unless the app is made with ``actions=True``: then every action route answers
  403 and changes nothing (the buttons are not shown either).
* **Authentication**: one or more tokens (``{"alice": "s3cret", ...}``; a single string is the
  operator ``"operator"``).  A browser logs in once with a token (``/login``) and gets a session
  cookie (``HttpOnly``, ``SameSite=Strict``); a script sends ``Authorization: Bearer TOKEN``.
  Tokens are compared in constant time.  Sessions live in the app's memory (a restart logs
  everyone out) and expire after ``SESSION_SECONDS``.
* **CSRF**: each session has its own random CSRF token, rendered in a hidden form field of
  every action form; a cookie-authenticated action without the matching field is refused.  On
  top of it, an action whose ``Origin`` (or, without one, ``Referer``) is not this site, or
  that a browser marks ``Sec-Fetch-Site: cross-site``, is refused before anything else.
"""

from __future__ import annotations

import secrets
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from starlette.requests import Request

SESSION_COOKIE = "pglogq_dashboard_session"
SESSION_SECONDS = 12 * 3600
MAX_SESSIONS = 1000


@dataclass
class Session:
    who: str
    csrf: str
    expires: float


@dataclass
class Auth:
    """Tokens and sessions of one dashboard app."""

    tokens: dict[str, str]
    """operator name -> token"""
    sessions: dict[str, Session] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @classmethod
    def from_option(cls, token: str | Mapping[str, str] | None) -> Auth:
        if token is None:
            return cls({})
        tokens = {"operator": token} if isinstance(token, str) else dict(token)
        for who, value in tokens.items():
            if not isinstance(value, str) or len(value) < 8:
                raise ValueError(f"the dashboard token of {who!r} must be a string of at least 8 characters")
            if not who or not isinstance(who, str):
                raise ValueError("a dashboard token needs an operator name")
        return cls(tokens)

    def who_has(self, token: str | None) -> str | None:
        """The operator whose token this is (constant-time comparison), or None."""
        if not token:
            return None
        found = None
        for who, value in self.tokens.items():
            if secrets.compare_digest(token.encode(), value.encode()):
                found = who
        return found

    def login(self, who: str) -> tuple[str, Session]:
        sid = secrets.token_urlsafe(32)
        session = Session(who, secrets.token_urlsafe(32), time.time() + SESSION_SECONDS)
        with self._lock:
            now = time.time()
            for old in [k for k, s in self.sessions.items() if s.expires < now]:
                del self.sessions[old]
            if len(self.sessions) >= MAX_SESSIONS:  # drop the oldest
                del self.sessions[min(self.sessions, key=lambda k: self.sessions[k].expires)]
            self.sessions[sid] = session
        return sid, session

    def logout(self, sid: str | None) -> None:
        if sid:
            with self._lock:
                self.sessions.pop(sid, None)

    def session(self, request: Request) -> Session | None:
        sid = request.cookies.get(SESSION_COOKIE)
        if not sid:
            return None
        with self._lock:
            s = self.sessions.get(sid)
            if s is not None and s.expires < time.time():
                del self.sessions[sid]
                s = None
        return s


def bearer(request: Request) -> str | None:
    value = request.headers.get("authorization", "")
    scheme, _, token = value.partition(" ")
    return token.strip() if scheme.lower() == "bearer" and token.strip() else None


def same_origin(request: Request) -> bool:
    """False for a request a browser says comes from another site (Origin, Referer, Sec-Fetch-Site)."""
    if request.headers.get("sec-fetch-site", "") == "cross-site":
        return False
    host = request.headers.get("host", "")
    origin = request.headers.get("origin")
    if origin is not None:
        if origin == "null":
            return False
        parts = urlsplit(origin)
        return parts.netloc == host and parts.scheme in ("http", "https")
    referer = request.headers.get("referer")
    if referer is not None:
        return urlsplit(referer).netloc == host
    return True  # no browser sent this (curl, a script): the token decides
