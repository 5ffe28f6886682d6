"""A management command that hands its arguments to one of pglogq's click commands, with the DSN
of the Django settings (``pglogq.contrib.django.dsn()``) unless ``--dsn`` is given."""

from __future__ import annotations

from typing import Any

import click
from django.core.management.base import BaseCommand, CommandError, CommandParser


class PassThroughCommand(BaseCommand):
    target: click.Command
    prog: str

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        # Django's own options (--settings, --verbosity...) are taken; the rest goes to pglogq
        known = parser.parse_known_args

        def parse_args(args: Any = None, namespace: Any = None) -> Any:
            ns, rest = known(args, namespace)
            ns.pglogq_args = rest
            return ns

        setattr(parser, "parse_args", parse_args)  # noqa: B010 (replacing a method)
        return parser

    def handle(self, *args: Any, **options: Any) -> None:
        from pglogq.contrib.django import dsn

        argv = [*args, *options.get("pglogq_args", [])]
        if not any(a == "--dsn" or a.startswith("--dsn=") for a in argv):
            argv += ["--dsn", dsn()]
        try:
            self.target.main(args=argv, prog_name=f"manage.py {self.prog}", standalone_mode=False)
        except click.exceptions.Exit as exc:
            if exc.exit_code:
                raise CommandError(f"exit code {exc.exit_code}", returncode=exc.exit_code) from exc
        except click.ClickException as exc:
            raise CommandError(exc.format_message(), returncode=exc.exit_code) from exc
        except SystemExit as exc:
            if exc.code not in (0, None):
                code = exc.code if isinstance(exc.code, int) else 1
                raise CommandError(f"exit code {exc.code}", returncode=code) from exc
