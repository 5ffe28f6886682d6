"""``pglogq cancel QUEUE MSG_ID [--running]``: withdraw an event no handler has started, or ask a
running one to stop."""

from __future__ import annotations

import click

from pglogq.cli.app import App, common_options, json_option, pass_app
from pglogq.cli.errors import CliError, Exit
from pglogq.cli.output import emit_json
from pglogq.cli.params import Int8


@click.command()
@click.argument("queue")
@click.argument("msg_id", type=Int8("message id"))
@click.option("--running", is_flag=True,
              help="If a handler has started on it, ask that handler to stop (it sees msg.cancel_requested).")
@common_options
@json_option
@pass_app
def cancel(app: App, queue: str, msg_id: int, running: bool) -> None:
    """Cancel event MSG_ID of QUEUE if no consumer's handler has started on it.

    It is then never started, also when a worker has received it in a page already.  With
    --running, a job already running is asked to stop instead (its handler decides how).
    Exit 0: cancelled (or, with --running, asked to stop); 5: not cancelled - a handler started
    on it (or it is done, dead, cancelled already or no longer stored); 3: unknown queue or id.

    JSON: {"queue": str, "msg_id": int, "cancelled": bool, "stop_requested": bool}
    """
    cancelled = app.client.cancel(queue, msg_id)
    stop = False
    if not cancelled and running:
        stop = app.client.request_stop(queue, msg_id)
    if app.json:
        emit_json({"queue": queue, "msg_id": msg_id, "cancelled": cancelled, "stop_requested": stop})
    elif cancelled:
        click.echo(f"message {msg_id} of queue {queue} cancelled: no handler will start on it")
    elif stop:
        click.echo(f"message {msg_id} of queue {queue} is running: its handler was asked to stop")
    if not cancelled and not stop:
        what = "and no handler runs it now" if running else "(--running asks a running one to stop)"
        raise CliError(
            f"message {msg_id} of queue {queue} was not cancelled: a handler has started on it, or it is "
            f"done, dead, cancelled already or no longer stored {what}", Exit.CONFLICT,
        )
