"""Run the audit where the lines are: DuckDB here (default), Spark, BigQuery or Athena.

The rules and the report pipeline are DuckDB SQL, translated per engine (``portable``); the engine
runs rules, attribution and aggregation in one query (``pipeline``) and only the aggregates come back
into the local store (``engine_runs``/``engine_results``), where the report layer reads them.

Every engine is an :class:`~billing_audit.engines.base.Engine` found by name: ``duckdb`` is built in, the
others are entry points of the group ``billing_audit.engines`` (pyproject.toml), imported when first
asked for, so the core never imports a connector:

>>> from billing_audit import engines
>>> engines.names()                                      # doctest: +SKIP
('athena', 'bigquery', 'duckdb', 'spark')
>>> engines.options_from_flat("bigquery", {"bq_table": "p.d.t", "spark_master": "local[2]"})  # doctest: +SKIP
BigQueryOptions(bq_table='p.d.t', bq_project=None, bq_endpoint=None, max_bytes_billed=None)
"""

from __future__ import annotations

import difflib
import functools
import importlib
import shutil
import types
import typing
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from billing_audit.config import Config
from billing_audit.engines.base import Engine, EngineOptions, EngineRunResult
from billing_audit.errors import BillingAuditError
from billing_audit.store import PERIOD, Store

if typing.TYPE_CHECKING:  # the rule loader (sqlglot, yaml) is imported by the commands that load rules
    from billing_audit.rules import Rule

__all__ = ["Engine", "EngineOptions", "EngineRunResult", "OptionSpec", "engine", "expected_source", "names",
           "option_specs", "options_from_flat", "run_engine", "write_lines"]

GROUP = "billing_audit.engines"
BUILTIN = {"duckdb": "billing_audit.engines.local:DuckDBEngine"}


@functools.cache
def _table() -> dict[str, str]:
    """Engine name -> ``module:Class``: the built-in DuckDB engine, then the installed entry points."""
    table = dict(BUILTIN)
    for ep in entry_points(group=GROUP):
        table.setdefault(ep.name, ep.value)
    return dict(sorted(table.items()))


def names() -> tuple[str, ...]:
    """Every engine's name, sorted."""
    return tuple(_table())


@functools.cache
def engine(name: str) -> Engine:
    """The engine called `name`, its module imported now; an unknown name gets a "did you mean" answer."""
    table = _table()
    if name not in table:
        near = difflib.get_close_matches(name, table, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise BillingAuditError(f"--engine {name!r}: unknown engine{hint}; choose one of {', '.join(table)}")
    module, _, attr = table[name].partition(":")
    cls = getattr(importlib.import_module(module), attr)
    if not (isinstance(cls, type) and issubclass(cls, Engine)):
        raise BillingAuditError(f"engine {name!r} ({table[name]}) is not an Engine class")
    return cls()


def _flag(name: str, info: Any) -> str:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    return str(extra.get("flag") or "--" + name.replace("_", "-"))


def options_from_flat(name: str, flat: Mapping[str, Any] | None = None) -> EngineOptions:
    """Engine `name`'s options from the command line's flat dict (every engine's settings in one, as
    click gives them): its own fields are taken, None means "not given" (the default applies), the
    other engines' settings are ignored."""
    model = engine(name).Options
    fields = model.model_fields
    given = {k: v for k, v in (flat or {}).items() if k in fields and v is not None}
    try:
        return model(**given)
    except ValidationError as e:
        err = e.errors()[0]
        field = str(err["loc"][0]) if err.get("loc") else ""
        flag = _flag(field, fields[field]) if field in fields else field
        raise BillingAuditError(f"{flag} {given.get(field)!r}: {err['msg']}") from None


@dataclass(frozen=True)
class OptionSpec:
    """One engine option as a command line shows it."""

    engine: str
    name: str  # the field (and the flat dict's key)
    flag: str
    metavar: str | None
    help: str
    type: str  # "str" or "int"
    default: Any
    choices: tuple[str, ...] | None = None
    min: int | None = None


def _spec(engine_name: str, name: str, info: Any) -> OptionSpec:
    extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
    ann = info.annotation
    args = [a for a in typing.get_args(ann) if a is not type(None)] if isinstance(ann, types.UnionType) else [ann]
    choices = None
    base = args[0] if args else str
    if typing.get_origin(base) is typing.Literal:
        choices = tuple(str(c) for c in typing.get_args(base))
        base = str
    low = next((m.ge for m in info.metadata if getattr(m, "ge", None) is not None), None)
    metavar = extra.get("metavar")
    return OptionSpec(engine_name, name, _flag(name, info), str(metavar) if metavar else None,
                      info.description or "", "int" if base is int else "str", info.default, choices,
                      int(low) if low is not None else None)


def option_specs() -> list[OptionSpec]:
    """Every engine's options (this imports every engine's module), engines by name, fields in order."""
    return [_spec(n, f, info) for n in names() for f, info in engine(n).Options.model_fields.items()]



LINES_MARKER = ".billing-audit-lines"


def write_lines(store: Store, folder: Path, period: str | None = None) -> int:
    """The store's canonical line items as parquet partitioned by provider and billing period
    (``x_Provider=aws/billing_period=2026-11/*.parquet``), for Spark or any parquet reader.  A folder
    this wrote before is replaced whole; any other non-empty folder is refused.  Returns the lines written."""
    from billing_audit.rollup import period_filter

    folder = Path(folder)
    if folder.exists() and any(folder.iterdir()) and not (folder / LINES_MARKER).exists():
        raise BillingAuditError(f"{folder}: not empty and not written by billing-audit; choose another folder")
    tmp = folder.with_name(folder.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    where = period_filter(period, "BillingPeriodStart")
    row = store.con.execute(f"SELECT count(*) FROM line_items WHERE {where}").fetchone()
    n = int(row[0]) if row else 0
    store.con.execute(
        f"COPY (SELECT *, strftime({PERIOD}, '%Y-%m') AS billing_period FROM line_items WHERE {where}) "
        f"TO '{str(tmp).replace(chr(39), chr(39) * 2)}' (FORMAT parquet, PARTITION_BY (x_Provider, billing_period))"
    )
    (tmp / LINES_MARKER).write_text(f"{n} canonical line items\n", encoding="utf-8")
    if folder.exists():
        shutil.rmtree(folder)
    tmp.rename(folder)
    return n


def expected_source(store: Store, engine_name: str, options: EngineOptions | Mapping[str, Any] | None = None) -> str | None:
    """What a run of `engine_name` with these options reads (stored with the run, matched when reusing one)."""
    eng = engine(engine_name)
    return eng.source(store, _options(engine_name, options))


def _options(name: str, options: EngineOptions | Mapping[str, Any] | None) -> EngineOptions:
    if isinstance(options, EngineOptions):
        want = engine(name).Options
        if not isinstance(options, want):
            raise BillingAuditError(f"--engine {name}: options {type(options).__qualname__} are not {name}'s")
        return options
    return options_from_flat(name, options)


def run_engine(store: Store, engine_name: str, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
               params: dict[str, Any] | None = None, checkpoint: dict[str, Any] | None = None,
               options: EngineOptions | Mapping[str, Any] | None = None, **flat: Any) -> int:
    """Run the audit on engine `engine_name`, store the aggregates it returns, and return the engine run id.

    `options`: the engine's Options model, or the command line's flat dict; keyword settings
    (``spark_master=...``) are the flat form too."""
    from billing_audit.engines import pipeline

    eng = engine(engine_name)
    if flat:
        base = options.model_dump() if isinstance(options, EngineOptions) else dict(options or {})
        options = {**base, **flat}
    opts = _options(engine_name, options)
    from billing_audit.pricing import prices_key

    key = pipeline.config_key(cfg, rules, params, prices_key(store.con))
    res = eng.run(store, rules, cfg, period, basis, params or {}, checkpoint, opts)
    run = pipeline.EngineRun(engine=engine_name, source=res.source, period=period, basis=basis, sql=res.sql,
                             config_key=key, bytes_processed=res.bytes_processed)
    return pipeline.store_results(store.con, run, res.rows)
