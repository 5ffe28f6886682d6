"""``pglogq dashboard``: serve the web dashboard (needs the ``dashboard`` extra)."""

from __future__ import annotations

import errno
import logging
import os
import secrets
import socket
import sys

import click

from pglogq.cli.app import App, common_options, pass_app
from pglogq.cli.errors import CliError, Exit

LOCAL_HOSTS = ("127.0.0.1", "localhost", "::1")


def parse_tokens(values: tuple[str, ...]) -> dict[str, str]:
    """``--token NAME=TOKEN`` (or just ``TOKEN``: the operator "operator") into {name: token}."""
    tokens: dict[str, str] = {}
    for value in values:
        name, sep, token = value.partition("=")
        if not sep:
            name, token = "operator", value
        name = name.strip()
        if not name or len(token) < 8:
            raise CliError(f"invalid --token {name or '?'}=…: a token has at least 8 characters, a name is not empty",
                           Exit.USAGE)
        if name in tokens:
            raise CliError(f"--token {name}: given twice", Exit.USAGE)
        tokens[name] = token
    return tokens


@click.command()
@click.option("--host", default="127.0.0.1", show_default=True, help="Address to listen on (localhost by default).")
@click.option("--port", type=click.IntRange(0, 65535), default=8740, show_default=True, help="Port to listen on.")
@click.option("--actions", is_flag=True,
              help="Allow the actions (replay, purge, cancel, pause/resume, seek); they need a token.")
@click.option("--token", "tokens", multiple=True, metavar="[NAME=]TOKEN",
              help="A token that may act, with the operator NAME logged with each action (repeatable; "
                   "else $PGLOGQ_DASHBOARD_TOKEN; with --actions and none, one is made and printed).")
@click.option("--refresh", type=click.FloatRange(0.2, 3600), default=2.0, show_default=True,
              help="Seconds between the live updates of an open page.")
@click.option("--root-path", default="", help="URL prefix when served behind a proxy under a sub-path.")
@click.option("--allowed-host", "allowed_hosts", multiple=True, metavar="HOST",
              help="A Host header to answer (repeatable; default: localhost names when listening on "
                   "localhost, any otherwise): refuses DNS-rebinding pages.")
@common_options
@pass_app
def dashboard(app: App, host: str, port: int, actions: bool, tokens: tuple[str, ...], refresh: float,
              root_path: str, allowed_hosts: tuple[str, ...]) -> None:
    """Serve the web dashboard: queues, consumers, in-flight work, dead letters, seek.

    Read-only unless --actions: then replaying, purging, cancelling, pausing and seeking need
    a login with a token (or `Authorization: Bearer TOKEN`), carry a CSRF token, are refused
    from other sites, and are logged with the operator's name.  Needs the `dashboard` extra:
    pip install -e '.[dashboard]' in the checkout (pip install 'pglogq[dashboard]' once published).
    """
    try:
        import uvicorn
        from starlette.middleware.trustedhost import TrustedHostMiddleware

        from pglogq.dashboard import create_app
    except ImportError as exc:
        raise CliError(f"the dashboard needs the 'dashboard' extra ({exc.name} is missing)", Exit.NOT_AVAILABLE,
                       hint="pip install -e '.[dashboard]' in the checkout "
                            "(pip install 'pglogq[dashboard]' once published)") from exc
    token_map = parse_tokens(tokens)
    sock = _listen(host, port)  # first: a port it cannot have ends the command before anything is said
    env_token = os.environ.get("PGLOGQ_DASHBOARD_TOKEN")
    if not token_map and env_token:
        token_map = parse_tokens((env_token,))
    if actions and not token_map:
        token_map = {"operator": secrets.token_urlsafe(24)}
        click.echo(f"actions token (log in with it): {token_map['operator']}", err=True)
    if tokens and not actions:
        click.echo("note: --token without --actions: the dashboard is read-only, the token is not used", err=True)
    if host not in LOCAL_HOSTS:
        click.echo(f"warning: listening on {host}, not only on this machine: put it behind TLS and your own access "
                   "control", err=True)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    dashboard_app = create_app(app.dsn, actions=actions, token=token_map or None, refresh=refresh)
    hosts = list(allowed_hosts) or (["127.0.0.1", "localhost", "[::1]", "::1"] if host in LOCAL_HOSTS else ["*"])
    asgi = TrustedHostMiddleware(dashboard_app, allowed_hosts=hosts, www_redirect=False)
    where = f"http://{host if ':' not in host else '[' + host + ']'}:{port}{root_path}/"
    click.echo(f"pglogq dashboard on {where} ({'actions enabled' if actions else 'read-only'})", err=True)
    server = uvicorn.Server(uvicorn.Config(asgi, root_path=root_path, log_level="warning", access_log=False))
    try:
        server.run(sockets=[sock])
    finally:
        sock.close()
    if not server.started:
        raise CliError("the dashboard did not start (see the lines above)", Exit.OTHER)


def _listen(host: str, port: int) -> socket.socket:
    """The dashboard's listening socket, bound before uvicorn starts: uvicorn reports a failed
    bind as its own log line and exits 3, which the command line documents as "not found"."""
    where = f"{host if ':' not in host else '[' + host + ']'}:{port}"
    sock = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET, socket.SOCK_STREAM)
    try:
        # as uvicorn does: a restart binds at once while the last run's connections linger in
        # TIME_WAIT; it never lets two processes listen on one port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(2048)
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            raise CliError(f"cannot listen on {where}: the address is in use (another process listens there)",
                           Exit.CONFLICT, hint="stop it or choose another --port") from exc
        if isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL:
            raise CliError(f"cannot listen on {where}: --host is not an address of this machine "
                           f"({exc.strerror or exc})", Exit.USAGE) from exc
        raise CliError(f"cannot listen on {where}: {exc.strerror or exc}", Exit.OTHER) from exc
    return sock
