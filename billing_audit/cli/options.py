"""The options several commands share, as decorators; the error handler; options from a pydantic model."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any, TypeVar

import click

from billing_audit.cli.console import say
from billing_audit.errors import BillingAuditError

if TYPE_CHECKING:
    from pydantic import BaseModel

    from billing_audit.engines import EngineOptions

F = TypeVar("F", bound=Callable[..., Any])

# billing_audit.store.DEFAULT_DB, written out so that the options do not import the store (and DuckDB) to show
# their help; tests/cli/test_startup.py holds the two equal.
DEFAULT_DB = "billing-audit.duckdb"


def handle_errors(f: F) -> F:
    """A BillingAuditError (or an I/O failure) becomes one line on stderr and its exit code; --debug re-raises.
    A closed stdout (``| head``) exits 0 quietly."""

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            result = f(*args, **kwargs)
            sys.stdout.flush()  # a closed pipe shows here, not in the interpreter's exit flush
            return result
        except BrokenPipeError:  # `billing-audit report | head`: the reader has all it wants; exit 0, quietly
            closed_pipe()
        except BillingAuditError as e:
            if debug_on():
                raise
            say(f"error: {e}")
            sys.exit(e.exit_code)
        except Exception as e:  # disk full, permissions, a vanished file (DuckDB is imported if it raised)
            duckdb = sys.modules.get("duckdb")
            if not isinstance(e, OSError) and not (duckdb is not None and isinstance(e, duckdb.Error)):
                raise
            io_like = isinstance(e, OSError) or (duckdb is not None and isinstance(e, duckdb.IOException)) or any(
                w in str(e) for w in ("Could not write", "No space left", "File too large", "IO Error"))
            if debug_on() or not io_like:
                raise
            where = f"{e.filename}: " if isinstance(e, OSError) and e.filename else ""
            say(f"error: {where}{e.strerror if isinstance(e, OSError) and e.strerror else e}")
            sys.exit(2)

    return wrapper  # type: ignore[return-value]


def closed_pipe() -> None:
    """stdout's reader went away: point stdout at /dev/null (so the exit flush cannot fail again) and exit 0."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    sys.exit(0)


def wait_option(f: F) -> F:
    """--wait: how long a command that writes the store waits for other processes to close it."""
    return click.option(
        "--wait", "wait", type=click.FloatRange(min=0), default=10.0, show_default=True, metavar="SECONDS",
        envvar="BILLING_AUDIT_LOCK_TIMEOUT", show_envvar=True,
        help="Wait this long for readers or another writer to close the store, then fail naming who holds it.",
    )(f)


# -- the global options: before the command (`billing-audit --db x summary`) or after it (`summary --db x`) ------
# Each command has them too; the value given after the command wins, then the one before it, then the
# environment, then the default.  They travel in ``ctx.meta``, which click shares along the context chain.
META_DB, META_QUIET, META_DEBUG = "billing_audit.db", "billing_audit.quiet", "billing_audit.debug"
DB_HELP = f"Store file (env BILLING_AUDIT_DB; default {DEFAULT_DB})."
DEBUG_HELP = "Show tracebacks instead of one-line errors."
QUIET_HELP = "Only warnings, errors and the results: no progress bars or notes."


def _flag(key: str) -> Callable[[click.Context, click.Parameter, Any], Any]:
    def remember(ctx: click.Context, param: click.Parameter, value: Any) -> Any:
        if value:
            ctx.meta[key] = True
        return bool(value) or bool(ctx.meta.get(key))

    return remember


def _root_db(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    if value is not None:
        ctx.meta[META_DB] = value
    return value


def _db(ctx: click.Context, param: click.Parameter, value: str | None) -> str:
    """The command's --db, else the one before the command, else $BILLING_AUDIT_DB, else the default."""
    if value is not None:
        return value
    return str(ctx.meta.get(META_DB) or os.environ.get("BILLING_AUDIT_DB") or DEFAULT_DB)


def global_options(f: F) -> F:
    """--db, -q/--quiet and --debug on the top-level group (before the command)."""
    f = click.option("--debug", is_flag=True, expose_value=False, callback=_flag(META_DEBUG), help=DEBUG_HELP)(f)
    f = click.option("-q", "--quiet", is_flag=True, expose_value=False, callback=_flag(META_QUIET), help=QUIET_HELP)(f)
    return click.option("--db", type=click.Path(dir_okay=False), expose_value=False, callback=_root_db,
                        help=DB_HELP + "  Commands that use a store take it after their name too.")(f)


def debug_on() -> bool:
    """--debug was given, before or after the command."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(META_DEBUG))


def quiet_on() -> bool:
    """-q/--quiet was given, before or after the command."""
    ctx = click.get_current_context(silent=True)
    return bool(ctx is not None and ctx.meta.get(META_QUIET))


def common_options(command: click.Command) -> click.Command:
    """-q/--quiet and --debug on ``command`` (and, for a group, on each of its commands): a command with its
    own quiet keeps it (and the one before the command turns it on too)."""
    names = {p.name for p in command.params}
    if "debug" not in names:
        command.params.append(click.Option(["--debug"], is_flag=True, expose_value=False,
                                           callback=_flag(META_DEBUG), help=DEBUG_HELP))
    quiet = next((p for p in command.params if p.name == "quiet"), None)
    if quiet is None:
        command.params.append(click.Option(["-q", "--quiet"], is_flag=True, expose_value=False,
                                           callback=_flag(META_QUIET), help=QUIET_HELP))
    elif quiet.callback is None:
        quiet.callback = _flag(META_QUIET)
    if isinstance(command, click.Group):
        if not getattr(command, "builds_commands", False):
            for sub in command.commands.values():
                common_options(sub)
    elif "db" not in names and command.callback is not None and not getattr(command.callback, "notes_db", False):
        command.callback = _noting_unused_db(command.callback)
    return command


def _noting_unused_db(callback: Callable[..., Any]) -> Callable[..., Any]:
    """A command that uses no store, given --db before its name (``billing-audit --db x.duckdb rules list``):
    says on stderr that the --db is ignored (a note: -q leaves it out), and runs.  Not an error: a wrapper or
    alias that puts --db before every command keeps working."""

    @functools.wraps(callback)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        from billing_audit.cli.console import note

        ctx = click.get_current_context()
        given = ctx.meta.get(META_DB)
        if given is not None:
            path = " ".join(["billing-audit", *ctx.command_path.split()[1:]])
            note(f"note: --db {given} is ignored: `{path}` uses no store")
        return callback(*args, **kwargs)

    wrapper.notes_db = True  # type: ignore[attr-defined]
    return wrapper


def db_option(f: F) -> F:
    return click.option(
        "--db",
        "db",
        default=None,
        callback=_db,
        type=click.Path(dir_okay=False),
        help=DB_HELP + "  May also go before the command.",
    )(f)


def bom_option(f: F) -> F:
    """--bom: the CSV the command writes starts with a UTF-8 byte order mark (for spreadsheets that need one)."""
    @functools.wraps(f)
    def wrapper(*args: Any, bom: bool = False, **kwargs: Any) -> Any:
        from billing_audit import inert

        with inert.csv_bom(bom):
            return f(*args, **kwargs)

    return click.option("--bom", is_flag=True,
                        help="Start CSV with a UTF-8 byte order mark (for spreadsheets that need one).")(wrapper)  # type: ignore[return-value]


def since_option(f: F) -> F:
    """--since YYYY-MM-DD, checked like --period (by the app layer: :func:`billing_audit.app.check_since`)."""
    return click.option("--since", metavar="YYYY-MM-DD", help="Only usage on or after this date (YYYY-MM-DD).")(f)


def format_option(*choices: str, default: str | None = None) -> Callable[[F], F]:
    """--format: one of ``choices`` (default the first)."""
    return click.option("--format", "fmt", type=click.Choice(list(choices)), default=default or choices[0],
                        show_default=True)


def period_option(help: str = "Only this billing month.") -> Callable[[F], F]:  # noqa: A002
    return click.option("--period", metavar="YYYY-MM", help=help)


def config_option(help: str = "Config file (default: ./billing-audit.toml when present).") -> Callable[[F], F]:  # noqa: A002
    return click.option("--config", "config_path", type=click.Path(dir_okay=False), help=help)


def quiet_option(help: str) -> Callable[[F], F]:  # noqa: A002
    return click.option("-q", "--quiet", is_flag=True, help=help)


def rules_option(f: F) -> F:
    return click.option(
        "--rules",
        "rule_dirs",
        multiple=True,
        type=click.Path(),
        help="Folder (or file) of extra rules; repeatable.  The built-in pack is always loaded.",
    )(f)


basis_option = click.option(
    "--cost-basis", type=click.Choice(["effective", "billed", "list"]), default="effective", show_default=True,
    help="Which cost the components and totals are shown in; savings are always effective spot cost against "
         "the on-demand equivalent (list cost).",
)


# -- engines ------------------------------------------------------------------------------------------------------
ENGINE_OPTIONS = ("engine", "spark_master", "spark_lines", "spark_source", "spark_raw", "spark_write_lines", "bq_table",
                  "bq_project", "bq_endpoint", "max_bytes_billed", "athena_table", "athena_kind", "athena_workgroup", "athena_output",
                  "aws_profile", "aws_region", "aws_endpoint")


class LazyHelpCommand(click.Command):
    """A command whose help names what the connectors read, written when shown rather than when the command
    is defined: ``head`` (its first paragraph, all that `billing-audit --help` lists) is fixed text, ``body()``
    the rest.  ``click.command(cls=LazyHelpCommand, head=..., body=...)``."""

    def __init__(self, *args: Any, head: str, body: Callable[[], str], **kwargs: Any) -> None:
        self._head, self._body, self._text = head, body, ""
        super().__init__(*args, **kwargs)

    @property
    def help(self) -> str:
        if not self._text:
            self._text = f"{self._head}\n\n{self._body()}"
        return self._text

    @help.setter
    def help(self, value: str | None) -> None:  # click sets it in __init__; the text comes from head and body
        pass

    def get_short_help_str(self, limit: int = 45) -> str:
        return click.Command(self.name, help=self._head).get_short_help_str(limit)


class LazyChoice(click.Choice):  # type: ignore[type-arg]  # generic from click 8.2 on
    """A click.Choice whose choices are looked up when first needed (the value is checked or help is shown),
    not when the command is defined: listing the commands imports nothing they name.  A value of ``known`` (one
    the loader always returns, e.g. the default) is taken without loading them: ``--engine duckdb`` does not read
    every installed package's entry points (60 ms of each report's start, here)."""

    def __init__(self, choices: Callable[[], Sequence[str]], case_sensitive: bool = True,
                 known: Sequence[str] = ()) -> None:
        self._load = choices
        self._choices: tuple[str, ...] | None = None
        self._known = tuple(known)
        super().__init__((), case_sensitive)

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> Any:
        if isinstance(value, str) and value in self._known:
            return value
        return super().convert(value, param, ctx)

    @property
    def choices(self) -> tuple[str, ...]:
        if self._choices is None:
            self._choices = tuple(self._load())
        return self._choices

    @choices.setter
    def choices(self, value: Sequence[str]) -> None:  # click.Choice.__init__ sets them; they come from the loader
        pass


def engine_names() -> list[str]:
    """The engines' names: the built-in DuckDB one, then the entry points of billing_audit.engines (read here, as
    :func:`billing_audit.engines.names` reads them, without importing the engines package and its store)."""
    from importlib.metadata import entry_points

    return ["duckdb", *sorted({ep.name for ep in entry_points(group="billing_audit.engines")} - {"duckdb"})]


def engine_options(f: Any) -> Any:
    """--engine and its settings: where rules, attribution and aggregation run (README: Scaling out).
    The command receives them as one `engine_opts` dict.  The flags are the engines' own option models'
    (``engines.option_specs()``, which imports every engine); they are written out here so that a command
    starts without importing any engine, and tests/test_engine_interface.py holds the two equal."""
    opts = [
        click.option("--engine", type=LazyChoice(engine_names, known=["duckdb"]), default="duckdb",
                     show_default=True, help="Where the heavy work runs; only aggregates come back into the store."),
        click.option("--spark-master", default="local[*]", show_default=True, help="Spark: the master URL."),
        click.option("--spark-lines", metavar="PATH|TABLE",
                     help="Spark: canonical lines as a parquet folder or catalog table (default: the store's "
                          "lines, written next to it as by `billing-audit lines-export`)."),
        click.option("--source", "spark_source", type=click.Choice(["lines", "raw"]), default="lines",
                     show_default=True,
                     help="Spark: `lines` (canonical lines: --spark-lines or the store's) or `raw` (the providers' "
                          "parquet export files, grouped into deliveries and mapped as local ingest does; "
                          "`audit PATHS --source raw` reads PATHS without ingesting them)."),
        click.option("--spark-raw", metavar="FOLDER",
                     help="Spark: the export folder --source raw reads (several: joined by the path separator, "
                          "':' on Linux); `audit` takes its PATHS."),
        click.option("--spark-write-lines", metavar="URI",
                     help="Spark --source raw: also write the kept canonical lines there, as parquet partitioned by "
                          "x_Provider and billing_period (the layout of `billing-audit lines-export`: "
                          "`--spark-lines URI` reads them); a folder it wrote before is replaced whole, any other "
                          "non-empty one refused."),
        click.option("--bq-table", metavar="PROJECT.DATASET.TABLE", help="BigQuery: the GCP billing export table."),
        click.option("--bq-project", help="BigQuery: the project that runs the query (default: the table's)."),
        click.option("--bq-endpoint", metavar="URL", help="BigQuery: another API endpoint (tests, proxies)."),
        click.option("--max-bytes-billed", type=click.IntRange(min=1), metavar="BYTES",
                     help="BigQuery: refuse (after a dry run) to process more than this."),
        click.option("--athena-table", metavar="DATABASE.TABLE", help="Athena: the CUR 2.0 or FOCUS Glue table."),
        click.option("--athena-kind", type=click.Choice(["cur2", "focus"]), default="cur2", show_default=True,
                     help="Athena: what the Glue table holds."),
        click.option("--athena-workgroup", default="primary", show_default=True, help="Athena: the workgroup."),
        click.option("--athena-output", metavar="S3_URL", help="Athena: result location (default: the workgroup's)."),
        click.option("--aws-profile", help="Athena: AWS profile."),
        click.option("--aws-region", help="Athena: AWS region."),
        click.option("--aws-endpoint", metavar="URL", help="Athena: another endpoint (tests, VPC endpoints)."),
    ]

    @functools.wraps(f)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        kwargs["engine_opts"] = {k: kwargs.pop(k) for k in ENGINE_OPTIONS}
        return f(*args, **kwargs)

    for o in reversed(opts):
        wrapper = o(wrapper)
    return wrapper


def engine_settings(engine_opts: dict[str, Any]) -> tuple[str, EngineOptions | None]:
    """(engine, its options) from the `engine_opts` dict; no options (nothing imported) for duckdb."""
    engine = str(engine_opts["engine"])
    if engine == "duckdb":
        return engine, None
    from billing_audit.engines import options_from_flat

    return engine, options_from_flat(engine, engine_opts)


# -- connectors ---------------------------------------------------------------------------------------------------
class ConnectorChoice(click.ParamType):  # type: ignore[type-arg]  # generic from click 8.2 on
    """One of the connectors that have a given part, looked up when the value is checked or help is shown."""

    name = "connector"

    def __init__(self, part: str | None) -> None:
        self.part = part  # None: the clouds the connectors read bills of (x_Provider values)

    def choices(self) -> tuple[str, ...]:
        from billing_audit.registry import providers, with_part

        return providers() if self.part is None else with_part(self.part)

    def get_metavar(self, param: click.Parameter, ctx: click.Context | None = None) -> str:
        return "[" + "|".join(self.choices()) + "]"

    def convert(self, value: Any, param: click.Parameter | None, ctx: click.Context | None) -> str:
        if value in self.choices():
            return str(value)
        self.fail(f"{value!r} is not one of {', '.join(map(repr, self.choices()))}.", param, ctx)


Decorator = Callable[[Callable[..., Any]], Callable[..., Any]]


def model_options(model: type[BaseModel], shared: dict[str, Decorator] | None = None) -> Decorator:
    """One click option per field of a pydantic model, in field order: the flag names, metavar, envvar and
    click type come from the field's ``json_schema_extra`` (``flag``: "--bucket" or "-q/--quiet", ``metavar``,
    ``envvar``, ``show_envvar``, ``path``: "dir"), the help from its description, the default from its default;
    a tuple field is a repeatable option, a bool one a flag, an int with ge/le bounds an IntRange.
    ``shared`` maps a field name to an option decorator placed just before that field's (e.g. --db).
    ``deprecated_flag`` (e.g. "--month") adds the old spelling as a hidden alias that says it is deprecated."""
    import annotated_types
    from pydantic_core import PydanticUndefined

    shared = shared or {}
    decorators: list[Decorator] = []
    renamed: dict[str, tuple[str, str, str]] = {}  # hidden dest -> (field, old flag, new flag)
    required: set[str] = set()
    for name, info in model.model_fields.items():
        if name in shared:
            decorators.append(shared[name])
        extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
        flags = str(extra.get("flag") or "--" + name.replace("_", "-")).split("/")
        kw: dict[str, Any] = {"help": info.description}
        ann = info.annotation
        origin = getattr(ann, "__origin__", None)
        if info.default is PydanticUndefined and info.default_factory is None:
            kw["required"] = True
        elif info.default is not None and info.default != ():
            kw["default"] = info.default
            kw["show_default"] = not isinstance(info.default, bool)
        if ann is bool:
            kw["is_flag"] = True
        elif origin is tuple:
            kw["multiple"] = True
        elif extra.get("path") == "dir":
            kw["type"] = click.Path(file_okay=False)
        elif ann is int or ann == (int | None):
            lo = next((int(str(m.ge)) for m in info.metadata if isinstance(m, annotated_types.Ge)), None)
            hi = next((int(str(m.le)) for m in info.metadata if isinstance(m, annotated_types.Le)), None)
            kw["type"] = click.IntRange(min=lo, max=hi) if lo is not None or hi is not None else int
        for key in ("metavar", "envvar", "show_envvar"):
            if key in extra:
                kw[key] = extra[key]
        if "deprecated_flag" in extra:  # the old spelling: hidden, still read, and said on stderr
            old = str(extra["deprecated_flag"])
            if kw.pop("required", False):  # either spelling will do: checked once both are read
                kw["help"] = f"{kw['help']}  Required."
                required.add(name)
            renamed[name + "__old"] = (name, old, flags[-1])
        decorators.append(click.option(*flags, name, **kw))
        if "deprecated_flag" in extra:
            decorators.append(click.option(old, name + "__old", hidden=True, multiple=kw.get("multiple", False),
                                           metavar=kw.get("metavar"), help=f"Deprecated: {flags[-1]}."))

    def apply(f: Callable[..., Any]) -> Callable[..., Any]:
        if renamed:
            inner = f

            @functools.wraps(inner)
            def merged(*args: Any, **kwargs: Any) -> Any:
                for key, (name, old, new) in renamed.items():
                    value = kwargs.pop(key)
                    if value:
                        say(f"note: {old} is deprecated; use {new} (it takes the same values)")
                        kwargs[name] = (*kwargs[name], *value) if isinstance(value, tuple) else value
                    if name in required and not kwargs[name]:
                        raise click.UsageError(f"Missing option '{new}'.")
                return inner(*args, **kwargs)

            f = merged
        for d in reversed(decorators):
            f = d(f)
        return f

    return apply
