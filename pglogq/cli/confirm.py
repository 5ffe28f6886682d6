"""Confirmation of destructive or bulk actions.

``--yes`` skips the prompt.  Without it the user is asked on a terminal; when stdin is not a
terminal (a script, a pipe, CI) the action is refused, so nothing is destroyed by accident.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from pglogq.cli.errors import CliError, Exit

F = TypeVar("F", bound=Callable[..., Any])

yes_option = click.option("--yes", "-y", is_flag=True, help="Do it without asking.")


def stdin_is_terminal() -> bool:
    try:
        return sys.stdin.isatty()
    except (AttributeError, ValueError):
        return False


def confirm(question: str, *, yes: bool) -> None:
    """Return when confirmed; else raise (exit 10)."""
    if yes:
        return
    if not stdin_is_terminal():
        raise CliError(
            f"refusing without --yes: {question.rstrip('?')}",
            Exit.NOT_CONFIRMED,
            hint="stdin is not a terminal; pass --yes to confirm",
        )
    try:
        answer = click.confirm(question, default=False, err=True)
    except click.Abort:  # Ctrl-C or end of input at the prompt
        answer = False
    if not answer:
        raise CliError("not confirmed: nothing changed", Exit.NOT_CONFIRMED)
