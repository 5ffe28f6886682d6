"""Generate the reference parts of the documentation from the code that defines them.

``python -m tests.tools.docgen`` rewrites every region of ``docs/**/*.md`` that is framed by::

    <!-- BEGIN GENERATED: name -->
    ...
    <!-- END GENERATED -->

with the text :data:`REGIONS` makes for ``name``, and writes the pages of :data:`PAGES` whole
(``docs/reference/cli.md``, from the click commands); ``--check`` only reports stale pages
(exit 1).  This is the one documentation command.
Sources: the header comments of ``sql/functions/*.sql`` (SQL reference), grouped and ordered
by ``sql/functions/MANIFEST``, which also says who may call what (``sql/roles.sql`` grants from
it), the signatures and docstrings of ``pglogq.__all__`` (Python reference),
``pglogq/errors.py`` (SQLSTATEs), ``set_queue_config.sql`` and the migrations (queue parameters,
with defaults), and the ticker daemon's metric objects (metrics).

This is a development tool: it reads the source checkout, not an installed wheel.
"""

from __future__ import annotations

import argparse
import dataclasses
import inspect
import json
import re
import sys
import textwrap
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[2]
SQL = REPO / "sql"

_REGION = re.compile(
    r"(<!-- BEGIN GENERATED: (?P<name>[\w-]+) -->\n)(?P<body>.*?)(<!-- END GENERATED -->)", re.S
)

# -- SQL function headers ------------------------------------------------------------------------

_SECTIONS = ("Parameters", "Returns", "Raises", "Tables", "Concurrency", "Thresholds")


@dataclass
class SqlFunction:
    name: str
    purpose: str
    signature: str
    sections: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)

    @property
    def public(self) -> bool:
        return not self.name.startswith("_")


def parse_sql_function(text: str) -> SqlFunction:
    """The header comment and the signature of one ``sql/functions/<name>.sql`` file."""
    header: list[str] = []
    for line in text.splitlines():
        if not line.startswith("--"):
            break
        header.append(line[3:] if line.startswith("-- ") else line[2:])
    first = re.match(r"pglogq\.(\w+)\((.*?)\):\s*(.*)", header[0]) if header else None
    if first is None:
        raise ValueError(f"no '-- pglogq.name(args): purpose' header line: {header[:1]}")
    name = first.group(1)
    purpose = [first.group(3)]
    sections: dict[str, list[str]] = {}
    notes: list[str] = []
    current: list[str] | None = None
    for line in header[1:]:
        key = re.match(r"(\w+):\s*(.*)", line)
        if key and key.group(1) in _SECTIONS:
            current = sections.setdefault(key.group(1), [])
            if key.group(2):
                current.append(key.group(2))
        elif line.startswith(" ") and current is not None:
            current.append(line)
        elif not sections:
            purpose.append(line.strip())
        else:
            current = None
            notes.append(line.strip())
    m = re.search(
        r"CREATE OR REPLACE FUNCTION\s+(pglogq\.\w+\s*\(.*?\))\s*(RETURNS\s+.*?)\s+(?:LANGUAGE|AS)\b",
        text,
        re.S | re.I,
    )
    signature = ""
    if m:
        signature = re.sub(r"\s+", " ", f"{m.group(1)} {m.group(2)}").replace("( ", "(").replace(" )", ")")
    return SqlFunction(name, " ".join(p for p in purpose if p), signature, sections, notes)


# -- the function manifest (sql/functions/MANIFEST: groups, order, grants) ------------------------


def sql_functions() -> list[SqlFunction]:
    """Every function file, in the manifest's order."""
    from pglogq import schema

    return [parse_sql_function(text) for _, text in schema.functions()]


def roles_map() -> dict[str, list[str]]:
    """Function name → roles granted EXECUTE (besides pglogq_admin, which gets every one)."""
    from pglogq import schema

    return schema.grant_map()


def _group_of(name: str) -> str:
    from pglogq import schema

    return next((e.group for e in schema.manifest() if e.name == name), "Other functions")


# -- end of the manifest part --------------------------------------------------------------------


def _section_md(lines: list[str]) -> str:
    """Header lines as Markdown: wrapped lines are joined, short-indented lines become a list."""
    paras: list[str] = []
    items: list[str] = []
    for line in lines:
        indent = len(line) - len(line.lstrip(" "))
        text = line.strip()
        if 0 < indent < 6:
            items.append(text)
        elif items and indent >= 6:
            items[-1] += " " + text
        elif paras and indent >= 6:
            paras[-1] += " " + text
        else:
            paras.append(text)
    out = " ".join(_md_escape(p) for p in paras)
    for item in items:
        typed = re.match(r"(\S+ \([^)]*\))\s+(.*)", item)
        if typed:
            term, desc = typed.groups()
        else:
            term, _, desc = re.sub(r"\s{2,}", "\t", item, count=1).partition("\t")
        out += f"\n    - {_md_escape(term)}: {_md_escape(desc)}".rstrip(": ")
    return out


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("<", "&lt;").replace(">", "&gt;").replace("*", "\\*")


def sql_reference() -> str:
    funcs = sql_functions()
    roles = roles_map()
    out: list[str] = []
    public = [f for f in funcs if f.public]
    order = list(dict.fromkeys(_group_of(f.name) for f in public))
    for title in order:
        group = [f for f in public if _group_of(f.name) == title]
        if not group:
            continue
        out.append(f"## {title}\n")
        for f in group:
            out.append(f"### pglogq.{f.name}\n")
            out.append("<!-- no-test: a signature, not a statement -->")
            out.append(f"```sql\n{f.signature}\n```\n")
            out.append(_md_escape(f.purpose[:1].upper() + f.purpose[1:]) + "\n")
            for key in _SECTIONS:
                if key in f.sections:
                    out.append(f"- **{key}:** {_section_md(f.sections[key])}")
            who = ["pglogq_admin", *roles.get(f.name, [])]
            out.append(f"- **Granted to:** {', '.join(f'`{r}`' for r in sorted(set(who)))}")
            if f.notes:
                out.append("\n" + _md_escape(" ".join(f.notes)))
            out.append("")
    helpers = [f for f in funcs if not f.public]
    if helpers:
        out.append("## Internal helpers\n")
        out.append("Not granted to any role; called by the functions above. Listed so that a reader of the "
                   "source knows what each one is for.\n")
        out.append("| function | purpose |\n| --- | --- |")
        for f in helpers:
            out.append(f"| `pglogq.{f.name}` | {_md_escape(f.purpose)} |")
        out.append("")
    return "\n".join(out)


# -- errors ----------------------------------------------------------------------------------------


def _raised_by() -> dict[str, tuple[str, list[str]]]:
    """SQLSTATE → (the usual description in the Raises lines, public functions raising it)."""
    descs: dict[str, list[str]] = {}
    who: dict[str, list[str]] = {}
    for f in sql_functions():
        text = " ".join(s.strip() for s in f.sections.get("Raises", []))
        for m in re.finditer(r"(PQ\d{3})((?:/PQ\d{3})*)\s+(.*?)(?=;|\.(?:\s|$)|$)", text):
            codes = [m.group(1), *re.findall(r"PQ\d{3}", m.group(2))]
            for code in codes:
                desc = re.sub(r"\s*\(.*", "", m.group(3)).strip()
                if f.public:
                    descs.setdefault(code, []).append(desc)
                    who.setdefault(code, []).append(f.name)
    out: dict[str, tuple[str, list[str]]] = {}
    for code, found in descs.items():
        best = min(set(found), key=lambda d: (-found.count(d), len(d), d))
        out[code] = (best, who[code])
    return out


def errors_reference() -> str:
    from pglogq import errors

    out = ["| SQLSTATE | exception class | parent | meaning | raised by |", "| --- | --- | --- | --- | --- |"]
    raised = _raised_by()
    for code, cls in sorted(errors.BY_SQLSTATE.items()):
        desc, who = raised.get(code, ("", []))
        own = cls.__dict__.get("__doc__")
        meaning = inspect.cleandoc(own).split("\n\n")[0].replace("\n", " ") if own else desc
        funcs = ", ".join(f"`{n}`" for n in sorted(set(who)))
        parent = cls.__mro__[1].__name__
        out.append(f"| `{code}` | `{cls.__name__}` | `{parent}` | {_md_escape(meaning)} | {funcs} |")
    out.append("")
    out.append("Classes without a SQLSTATE of their own:\n")
    out.append("| class | parent | meaning |\n| --- | --- | --- |")
    for name, cls in sorted(vars(errors).items()):
        if (
            inspect.isclass(cls)
            and issubclass(cls, errors.PglogqError)
            and cls.__dict__.get("sqlstate") is None
            and cls.__module__ == errors.__name__
        ):
            doc = inspect.cleandoc(cls.__doc__ or "").split("\n\n")[0].replace("\n", " ")
            parent = cls.__mro__[1].__name__ if cls is not errors.PglogqError else "Exception"
            out.append(f"| `{name}` | `{parent}` | {_md_escape(doc)} |")
    tree = (errors.__doc__ or "").split("Exception tree::", 1)
    if len(tree) == 2:
        out.append("\nThe tree, as `pglogq/errors.py` draws it:\n")
        out.append("```text\n" + inspect.cleandoc(tree[1]).rstrip() + "\n```")
    out.append("")
    return "\n".join(out)


# -- Python API --------------------------------------------------------------------------------------


def _signature(obj: Any) -> str:
    """``(a: int, *, b: str = 'x') -> bool`` without ``self`` and with annotations unquoted."""
    try:
        sig = inspect.signature(obj)
    except (TypeError, ValueError):
        return "(...)"
    parts: list[str] = []
    star_done = False
    for p in sig.parameters.values():
        if p.name == "self":
            continue
        if p.kind is p.KEYWORD_ONLY and not star_done:
            parts.append("*")
            star_done = True
        if p.kind is p.VAR_POSITIONAL:
            star_done = True
        prefix = "*" if p.kind is p.VAR_POSITIONAL else "**" if p.kind is p.VAR_KEYWORD else ""
        text = prefix + p.name
        if p.annotation is not p.empty:
            text += f": {_annotation(p.annotation)}"
        if p.default is not p.empty:
            default = re.sub(r" at 0x[0-9a-f]+", "", repr(p.default))
            text += f" = {default}" if p.annotation is not p.empty else f"={default}"
        parts.append(text)
    out = f"({', '.join(parts)})"
    if sig.return_annotation is not sig.empty and _annotation(sig.return_annotation) != "None":
        out += f" -> {_annotation(sig.return_annotation)}"
    return out


def _annotation(ann: Any) -> str:
    if isinstance(ann, str):
        return ann
    if inspect.isclass(ann):
        return ann.__name__
    return str(ann).replace("typing.", "")


def _rst_to_md(text: str) -> str:
    text = re.sub(r":\w+:`~?([^`]+)`", r"`\1`", text)
    return text.replace("``", "`")


def _doc(obj: Any) -> str:
    doc = inspect.getdoc(obj)
    return _rst_to_md(doc).replace("|", "\\|") if doc else ""


def _public_members(cls: type) -> list[tuple[str, Any]]:
    out = []
    for name, member in cls.__dict__.items():
        if name.startswith("_") and name not in ("__init__", "__iter__", "__len__"):
            continue
        if name in ("__iter__", "__len__"):
            continue
        if callable(member) or isinstance(member, property):
            out.append((name, member))
    return out


def _class_md(name: str, cls: type, level: str = "###") -> list[str]:
    out = [f"{level} {name}\n"]
    if dataclasses.is_dataclass(cls) and not any(not m.startswith("_") and callable(v) for m, v in vars(cls).items()):
        out.append(f"`{name}{_signature(cls)}`\n")
        if _doc(cls) and not (cls.__doc__ or "").startswith(f"{name}("):
            out.append(_doc(cls) + "\n")
        out.append("| field | type |\n| --- | --- |")
        for f in dataclasses.fields(cls):
            out.append(f"| `{f.name}` | `{_md_escape(str(f.type))}` |")
        out.append("")
        return out
    out.append(f"`{name}{_signature(vars(cls).get('__init__', cls))}`\n")
    if _doc(cls):
        out.append(_doc(cls) + "\n")
    for mname, member in _public_members(cls):
        if mname == "__init__":
            continue
        if isinstance(member, property):
            out.append(f"- `{mname}` (property) — {_doc(member)}".rstrip(" —"))
            continue
        prefix = "async " if inspect.iscoroutinefunction(member) or inspect.isasyncgenfunction(member) else ""
        doc = _doc(member).replace("\n\n", "\n").replace("\n", " ")
        out.append(f"- `{prefix}{mname}{_signature(member)}`" + (f"<br>{doc}" if doc else ""))
    out.append("")
    return out


def python_reference() -> str:
    import pglogq

    out: list[str] = []
    names = sorted(pglogq.__all__, key=lambda n: (n.startswith("Async"), n))
    exceptions = [
        n for n in names if inspect.isclass(getattr(pglogq, n)) and issubclass(getattr(pglogq, n), BaseException)
    ]
    classes = [n for n in names if n not in exceptions and inspect.isclass(getattr(pglogq, n))]
    data = [
        n for n in classes
        if dataclasses.is_dataclass(getattr(pglogq, n))
        and not any(not m.startswith("_") and callable(v) for m, v in vars(getattr(pglogq, n)).items())
    ]
    behaviour = [n for n in classes if n not in data]
    other = [n for n in names if n not in exceptions and n not in classes]
    out.append("## Classes\n")
    for n in behaviour:
        out.extend(_class_md(n, getattr(pglogq, n)))
    out.append("## Data returned by the client\n")
    for n in data:
        out.extend(_class_md(n, getattr(pglogq, n)))
    if other:
        out.append("## Functions and values\n")
        for n in other:
            obj = getattr(pglogq, n)
            if callable(obj):
                out.append(f"- `{n}{_signature(obj)}`" + (f"<br>{_doc(obj)}" if _doc(obj) else ""))
            else:
                out.append(f"- `{n}`")
        out.append("")
    out.append("## Exceptions\n")
    out.append("Every exception is exported from `pglogq` and documented with its SQLSTATE in "
               "[Errors](errors.md):\n")
    out.append(", ".join(f"`{n}`" for n in exceptions) + ".\n")
    return "\n".join(out)


INTEGRATIONS = ("pglogq.contrib.otel", "pglogq.contrib.django", "pglogq.contrib.sqlalchemy")
"""The modules of pglogq.contrib documented in the Python reference (their ``__all__``)."""


def integrations_reference() -> str:
    import importlib

    out: list[str] = []
    for modname in INTEGRATIONS:
        module = importlib.import_module(modname)
        first = (inspect.getdoc(module) or "").split("\n\n")[0].replace("\n", " ")
        out.append(f"### {modname}\n")
        out.append(_rst_to_md(first) + "\n")
        for n in module.__all__:
            obj = getattr(module, n)
            prefix = "async " if inspect.iscoroutinefunction(obj) else ""
            doc = _doc(obj).replace("\n\n", "\n").replace("\n", " ")
            out.append(f"- `{prefix}{n}{_signature(obj)}`" + (f"<br>{doc}" if doc else ""))
        out.append("")
    return "\n".join(out)


# -- configuration -----------------------------------------------------------------------------------


def queue_defaults() -> dict[str, str]:
    """Column defaults of pglogq.queue, from the migrations (later migrations win)."""
    out: dict[str, str] = {}
    for path in sorted((SQL / "migrations").glob("*.sql")):
        text = path.read_text(encoding="utf-8")
        column = r"^\s*(?:ADD COLUMN\s+(?:IF NOT EXISTS\s+)?)?(\w+)\s+\w+[^,\n]*?DEFAULT\s+([^,\n]+?)\s*,?\s*(?:--.*)?$"
        for m in re.finditer(column, text, re.M | re.I):
            out[m.group(1)] = m.group(2).strip().rstrip(",").strip("'")
        for m in re.finditer(r"ALTER COLUMN\s+(\w+)\s+SET DEFAULT\s+([^,;\n]+)", text, re.I):
            out[m.group(1)] = m.group(2).strip().strip("'")
    return out


def queue_parameters() -> str:
    path = SQL / "functions" / "set_queue_config.sql"
    fn = parse_sql_function(path.read_text(encoding="utf-8"))
    defaults = queue_defaults()
    out = ["| parameter | type | default | meaning |", "| --- | --- | --- | --- |"]
    for line in fn.sections.get("Parameters", []):
        m = re.match(r"\s+(\w+) \(([^)]*)\)\s+(.*)", line)
        if m:
            name, kind, meaning = m.groups()
            default = defaults.get(name, "")
            out.append(f"| `{name}` | {_md_escape(kind)} | `{default}` | {_md_escape(meaning)} |")
    out.append("")
    return "\n".join(out)


# -- metrics -----------------------------------------------------------------------------------------


def metric_families() -> list[Any]:
    """The metric families the ticker daemon exposes (names, types, help, labels), collected
    without any database: the collector yields every family even when it has no samples."""
    from pglogq.tickerd.metrics import TickerCollector

    return list(TickerCollector(lambda: []).collect())


def metrics_table() -> str:
    families = metric_families()
    out = ["| metric | type | labels | meaning |", "| --- | --- | --- | --- |"]
    for fam in families:
        name = fam.name + ("_total" if fam.type == "counter" else "")
        labels = ", ".join(f"`{label}`" for label in getattr(fam, "_labelnames", ()))
        out.append(f"| `{name}` | {fam.type} | {labels} | {_md_escape(fam.documentation)} |")
    out.append("")
    return "\n".join(out)


# -- benchmarks --------------------------------------------------------------------------------------

BENCH_RESULTS = REPO / "docs" / "benchmarks" / "results.json"


def _fmt(value: float, unit: str) -> str:
    if unit == "bytes":
        return f"{value / 1e6:,.2f} MB" if value >= 1e5 else f"{value / 1e3:,.0f} kB"
    if abs(value) >= 100:
        return f"{value:,.0f}"
    if abs(value) >= 10:
        return f"{value:,.1f}"
    return f"{value:,.2f}"


def benchmark_summary(path: Path | None = None) -> str:
    """Every measure of the committed benchmark run, one table per scenario (a row per case, a column per system)."""
    path = path or BENCH_RESULTS
    if not path.exists():
        return (
            '!!! warning "No committed benchmark run yet"\n'
            "    This section is generated from `docs/benchmarks/results.json` once the benchmark "
            "suite has committed a run.\n"
        )
    data = json.loads(path.read_text(encoding="utf-8"))
    meta = data.get("meta", {})
    machine = meta.get("machine", {})
    pg = meta.get("postgresql_settings", {})
    out = [
        f"Run of {meta.get('started_at', '?')} ({meta.get('mode', '?')} mode, "
        f"{meta.get('duration_seconds', 0):,.0f} s): {machine.get('cpus', '?')} CPUs "
        f"({machine.get('cpu', '?')}), PostgreSQL {pg.get('server_version', '?')} with fsync "
        f"{pg.get('fsync', '?')} and synchronous_commit {pg.get('synchronous_commit', '?')}, "
        f"payload {meta.get('payload_bytes', '?')} bytes. Load average at start: "
        f"{', '.join(str(x) for x in machine.get('load_average_at_start', []))}.",
        "",
    ]
    scenarios: dict[str, dict[str, dict[str, tuple[float, str]]]] = {}
    for m in data.get("measures", []):
        row = scenarios.setdefault(m["scenario"], {}).setdefault(m["case"], {})
        row[m["system"]] = (float(m["value"]), str(m["unit"]))
    for scenario, cases in scenarios.items():
        systems: list[str] = []
        for values in cases.values():
            systems.extend(s for s in values if s not in systems)
        out.append(f"**{scenario}**\n")
        out.append("| case | unit | " + " | ".join(_md_escape(s) for s in systems) + " |")
        out.append("| --- | --- |" + " --- |" * len(systems))
        for case, values in cases.items():
            unit = next(iter(values.values()))[1]
            cells = [_fmt(*values[s]) if s in values else "" for s in systems]
            shown_unit = "MB/kB" if unit == "bytes" else unit
            out.append(f"| {_md_escape(case)} | {shown_unit} | " + " | ".join(cells) + " |")
        for note in data.get("notes", {}).get(scenario, []):
            out.append(f"\n*{_md_escape(str(note))}*")
        out.append("")
    skips = data.get("skips", [])
    if skips:
        out.append("Not measured:\n")
        out.extend(f"- {_md_escape(k['system'])} ({k['scenario']}): {_md_escape(k['reason'])}" for k in skips)
        out.append("")
    return "\n".join(out)


# -- the CLI reference (a whole page) ------------------------------------------------------------

CLI_WIDTH = 80

CLI_INTRO = """\
# `pglogq` command line reference

<!-- generated by `python -m tests.tools.docgen`: do not edit by hand;
     `python -m tests.tools.docgen --check` (run by the tests) fails when this page is out of date -->

Every command:

- takes `--dsn DSN`; without it `PGLOGQ_DSN` is used, else the embedded PostgreSQL (started
  on demand and announced on stderr, so you always know which database you talk to);
  `--dsn` may also come before the command: `pglogq --dsn postgresql:///app queue list`;
- prints human tables (fit for 80 columns) on stdout, or JSON with `--json`;
- reports an error as one line on stderr, `pglogq: error: <what>; <hint>`, and exits with the
  code of its class (below); `--debug` adds the traceback;
- asks before destructive or bulk actions (`queue drop`, `consumer unsubscribe`,
  `dlq replay-all`, `dlq purge`) unless `--yes`, and refuses without `--yes` when stdin is not a
  terminal (scripts, pipes, CI);
- changes nothing when it refuses an input: a command that changes several things (`queue create
  --set`, `send` from stdin, `dlq replay ID...`) does all of them in one transaction, or none;
- treats a closed stdout (the reader went away, e.g. `| head`) as a normal end: exit 0, nothing
  more printed, and `receive` acknowledges only the pages it wrote; Ctrl-C exits 130 and says
  what was done before (`tail` and `status --watch` end normally on Ctrl-C);
- prints payloads and headers exactly as PostgreSQL stores them, and sends a payload exactly as
  written (checked first: `NaN` and `Infinity` are not JSON).

A value that does not parse as its option's type, or lies outside the range shown in the help
(`--max 0`, `--delay 99999999999d`, a DSN that cannot be parsed), is a usage error (2); a
well-formed value that pglogq refuses (a bad name or setting, a payload PostgreSQL refuses, an
integer beyond 64 bits, a seek position out of range) is invalid input (4).
"""


def _exit_codes() -> str:
    from pglogq.cli.errors import EXIT_TABLE

    lines = ["## Exit codes", "", "| code | meaning |", "| ---- | ------- |"]
    lines += [f"| {code} | {text} |" for code, text in EXIT_TABLE]
    return "\n".join(lines) + "\n"


def _json_conventions() -> str:
    from pglogq.cli.output import __doc__ as OUTPUT_DOC

    body = (OUTPUT_DOC or "").split("\n\n", 1)[1].strip().replace("``", "`")
    body += (" Each command's JSON shape is given at the end of its help below; keys are only ever"
             " added, never renamed or removed, within a major version.")
    return "## JSON output\n\n" + textwrap.fill(" ".join(body.split()), 96) + "\n"


def _walk(cmd: Any, path: list[str], parent: Any) -> list[str]:
    import click

    name = path[-1]
    settings = {**cmd.context_settings, "terminal_width": CLI_WIDTH, "max_content_width": CLI_WIDTH}
    ctx = click.Context(cmd, info_name=name, parent=parent, **settings)
    heading = f"{'#' * (3 if len(path) <= 2 else 4)} `{' '.join(path)}`"
    out = [heading, "", "```text", cmd.get_help(ctx).rstrip(), "```", ""]
    if isinstance(cmd, click.Group):
        lazy = getattr(cmd, "lazy", {})
        for sub in cmd.list_commands(ctx):
            if sub in lazy:
                continue
            child = cmd.get_command(ctx, sub)
            if child is not None and not child.hidden:
                out += _walk(child, [*path, sub], ctx)
    return out


def _hosted() -> str:
    from pglogq.cli.main import HOSTED, TICKER_HOSTED

    lines = ["## Hosted commands", "",
             "These come with the part of pglogq they run and are loaded on first use; when one is "
             "missing from an installation the command says so and exits 9.", ""]
    for name, (target, text) in sorted(HOSTED.items()):
        lines.append(f"- `pglogq {name}` ({target}): {text} See `pglogq {name} --help`.")
    for name, (target, text) in sorted(TICKER_HOSTED.items()):
        lines.append(f"- `pglogq ticker {name}` ({target}): {text} See `pglogq ticker {name} --help`.")
    return "\n".join(lines) + "\n"


def cli_reference() -> str:
    """The whole of ``docs/reference/cli.md``, from the click commands themselves."""
    from pglogq.cli.main import main

    parts = [CLI_INTRO, _exit_codes(), _json_conventions(), "## Commands\n", "\n".join(_walk(main, ["pglogq"], None)),
             _hosted()]
    return "\n".join(p.rstrip("\n") + "\n" for p in parts)



# -- regions -----------------------------------------------------------------------------------------

REGIONS: dict[str, Callable[[], str]] = {
    "sql-reference": sql_reference,
    "errors": errors_reference,
    "python-reference": python_reference,
    "python-integrations": integrations_reference,
    "queue-parameters": queue_parameters,
    "metrics": metrics_table,
    "benchmark-summary": benchmark_summary,
}


PAGES: dict[str, Callable[[], str]] = {
    "reference/cli.md": cli_reference,
}
"""Pages generated whole (relative to docs/), beside the regions of the others."""


def render(text: str, cache: dict[str, str]) -> str:
    def fill(m: re.Match[str]) -> str:
        name = m.group("name")
        if name not in REGIONS:
            raise KeyError(f"unknown generated region {name!r}; known: {sorted(REGIONS)}")
        if name not in cache:
            cache[name] = REGIONS[name]().rstrip("\n") + "\n"
        return m.group(1) + cache[name] + m.group(4)

    return _REGION.sub(fill, text)


def _pages(docs: Path) -> list[Path]:
    return sorted(p for p in docs.rglob("*.md") if "BEGIN GENERATED:" in p.read_text(encoding="utf-8"))


def _generated(docs: Path) -> list[tuple[Path, str, str]]:
    """(page, its text now, the text the code says it should have) for every generated page."""
    cache: dict[str, str] = {}
    out = []
    for page in _pages(docs):
        text = page.read_text(encoding="utf-8")
        out.append((page, text, render(text, cache)))
    for rel, make in PAGES.items():
        page = docs / rel
        text = page.read_text(encoding="utf-8") if page.exists() else ""
        out.append((page, text, make()))
    return out


def stale_pages(docs: Path = REPO / "docs") -> list[str]:
    """Pages (whole or with regions) that differ from what the code says now."""
    return [str(page.relative_to(docs)) for page, text, new in _generated(docs) if new != text]


def write_pages(docs: Path = REPO / "docs") -> list[str]:
    changed = []
    for page, text, new in _generated(docs):
        if new != text:
            page.write_text(new, encoding="utf-8")
            changed.append(str(page.relative_to(docs)))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tests.tools.docgen", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="report stale pages, change nothing (exit 1 if any)")
    parser.add_argument("--docs", type=Path, default=REPO / "docs", help="the docs directory")
    args = parser.parse_args(argv)
    if args.check:
        stale = stale_pages(args.docs)
        for page in stale:
            print(f"stale: {page}", file=sys.stderr)
        return 1 if stale else 0
    for page in write_pages(args.docs):
        print(f"wrote {page}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
