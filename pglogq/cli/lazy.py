"""A click group whose subcommands are loaded from ``"module:attr"`` on first use.

Commands provided by other parts of pglogq (the ticker daemon, the worker runtime) are mounted
this way, so that ``pglogq queue list`` imports neither; a module that fails to import turns
into a clear "not available" message for that command only, and never breaks the rest of the CLI.
"""

from __future__ import annotations

import importlib
from typing import Any

import click

from pglogq.cli.errors import CliError, Exit


class LazyGroup(click.Group):
    """``LazyGroup(lazy={"worker": ("pglogq.worker:command", "Run workers ...")})``."""

    def __init__(self, *args: Any, lazy: dict[str, tuple[str, str]] | None = None, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.lazy: dict[str, tuple[str, str]] = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(set(super().list_commands(ctx)) | set(self.lazy))

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy:
            return self._load(cmd_name)
        return super().get_command(ctx, cmd_name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """Like click's, but lazy commands show their registered text and are not imported."""
        rows: list[tuple[str, str]] = []
        names = self.list_commands(ctx)
        limit = formatter.width - 6 - max((len(n) for n in names), default=0)
        for name in names:
            if name in self.lazy:
                rows.append((name, self.lazy[name][1]))
                continue
            cmd = super().get_command(ctx, name)
            if cmd is not None and not cmd.hidden:
                rows.append((name, cmd.get_short_help_str(limit)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)

    def _load(self, name: str) -> click.Command:
        target, short_help = self.lazy[name]
        module_name, _, attr = target.partition(":")
        try:
            module = importlib.import_module(module_name)
            cmd = getattr(module, attr)
        except (ImportError, AttributeError) as exc:
            return unavailable(name, target, short_help, exc)
        if not isinstance(cmd, click.Command):
            return unavailable(name, target, short_help, TypeError(f"{target} is not a click command"))
        return cmd


def unavailable(name: str, target: str, short_help: str, exc: BaseException) -> click.Command:
    """A stand-in command that explains why ``name`` cannot run here."""
    reason = f"{type(exc).__name__}: {exc}"

    @click.command(
        name,
        help=f"{short_help}\n\n(Not available in this installation: {target} could not be loaded.)",
        short_help=f"{short_help} [not available]",
        context_settings={"ignore_unknown_options": True, "allow_extra_args": True},
        add_help_option=True,
    )
    def cmd() -> None:
        raise CliError(
            f"`{name}` is not available in this installation ({target} could not be loaded: {reason})",
            Exit.NOT_AVAILABLE,
            hint="install a pglogq version that includes it",
        )

    return cmd
