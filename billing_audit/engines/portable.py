"""The portability layer: DuckDB SQL (rules, the report pipeline) as Spark, BigQuery or Trino/Athena SQL.

Rules and the pipeline are written once, in DuckDB SQL.  sqlglot translates most of it (regexp_matches,
concat_ws, casts, date arithmetic, bool_or, IS NOT DISTINCT FROM).  What it cannot translate on its own
is rewritten here, on the syntax tree, the same way for every rule:

============================  =============================  ===============================  =========================
DuckDB                        Spark SQL                      BigQuery                         Trino / Athena
============================  =============================  ===============================  =========================
``$param``                    literal (lists: ARRAY(...))    literal (lists: [...])           literal (ARRAY[...])
``Tags['k']`` (map access)    ``TRY_ELEMENT_AT(Tags, 'k')``  ``(SELECT value FROM              ``ELEMENT_AT(Tags, 'k')``
                                                             UNNEST(Tags) WHERE key = 'k')``
``list_has_any(list_transform ``ARRAYS_OVERLAP(TRANSFORM(    ``EXISTS(SELECT 1 FROM UNNEST(L)  ``ARRAYS_OVERLAP(TRANSFORM(
(L, lambda k: E), V)``        L, k -> E), V)``               AS k WHERE E IN UNNEST(V))``      L, k -> E), V)``
``LIKE p ESCAPE '\\'``          unchanged                      ``LIKE p`` (backslash is          unchanged
                                                             BigQuery's escape)
DECIMAL(38,12) money          DECIMAL(38,12)                 BIGNUMERIC                       DECIMAL(38,12)
============================  =============================  ===============================  =========================

On BigQuery the canonical ``Tags`` is ``ARRAY<STRUCT<key STRING, value STRING>>`` (how the billing export
carries labels); on Spark and Trino it is a ``MAP<STRING, STRING>``.  Anything else sqlglot reports as
unsupported makes the rule fail to load for that engine, with the rule's id and the reason
(:class:`NotPortable`), rather than run with different meaning.
"""

from __future__ import annotations

import copy
from typing import Any

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, UnsupportedError

DIALECTS = {"duckdb": "duckdb", "spark": "spark", "bigquery": "bigquery", "athena": "trino"}


class NotPortable(Exception):
    """A rule or query uses something the target engine cannot run."""


def literal(value: Any) -> exp.Expression:
    """A Python value as a SQL literal expression."""
    if value is None:
        return exp.Null()
    if isinstance(value, bool):
        return exp.Boolean(this=value)
    if isinstance(value, (int, float)):
        return exp.Literal.number(value)
    if isinstance(value, (list, tuple)):
        return exp.Array(expressions=[literal(v) for v in value])
    return exp.Literal.string(str(value))


def inline_params(tree: exp.Expression, values: dict[str, Any]) -> exp.Expression:
    """Replace ``$name`` placeholders by literals (engines get plain SQL; no bind protocol to agree on)."""
    tree = copy.deepcopy(tree)
    for p in list(tree.find_all(exp.Placeholder)):
        if p.name:
            if p.name not in values:
                raise NotPortable(f"${p.name} has no value")
            p.replace(literal(values[p.name]))
    return tree


def _is_tags(node: exp.Expression) -> bool:
    return isinstance(node, exp.Column) and node.name.lower() == "tags"


def _tag_lookup(tags: exp.Expression, key: exp.Expression, engine: str) -> exp.Expression:
    if engine == "bigquery":
        t, k = tags.sql(dialect="bigquery"), key.sql(dialect="bigquery")
        return sqlglot.parse_one(f"(SELECT tg.value FROM UNNEST({t}) AS tg WHERE tg.key = {k} LIMIT 1)",
                                 read="bigquery")
    name = "TRY_ELEMENT_AT" if engine == "spark" else "ELEMENT_AT"
    return exp.Anonymous(this=name, expressions=[tags.copy(), key.copy()])


def _overlap(node: exp.ArrayOverlaps, engine: str) -> exp.Expression:
    left, right = node.this, node.expression
    if engine != "bigquery":
        return exp.Anonymous(this="ARRAYS_OVERLAP", expressions=[left.copy(), right.copy()])
    if isinstance(left, exp.Transform) and isinstance(left.expression, exp.Lambda):
        lam = left.expression
        var, body, src = lam.expressions[0].name, lam.this, left.this
    else:
        var, body, src = "x", exp.column("x"), left
    b, s, r = (e.sql(dialect="bigquery") for e in (body, src, right))
    return sqlglot.parse_one(f"EXISTS(SELECT 1 FROM UNNEST({s}) AS {var} WHERE {b} IN UNNEST({r}))", read="bigquery")


def _rewrite(tree: exp.Expression, engine: str) -> exp.Expression:
    for node in list(tree.find_all(exp.Bracket)):  # innermost first does not matter: keys are plain
        if _is_tags(node.this) and len(node.expressions) == 1:
            node.replace(_tag_lookup(node.this, node.expressions[0], engine))
    for node in list(tree.find_all(exp.ArrayOverlaps)):
        node.replace(_overlap(node, engine))
    if engine == "bigquery":
        for node in list(tree.find_all(exp.ConcatWs)):  # no CONCAT_WS; ARRAY_TO_STRING skips NULLs like DuckDB
            sep, *parts = node.expressions
            node.replace(exp.Anonymous(this="ARRAY_TO_STRING",
                                       expressions=[exp.Array(expressions=[p.copy() for p in parts]), sep.copy()]))
        for node in list(tree.find_all(exp.DateDiff)):  # the canonical times are DATETIME on BigQuery
            unit = (node.text("unit") or "DAY").upper()
            a, b = node.expression.sql(dialect="bigquery"), node.this.sql(dialect="bigquery")
            node.replace(sqlglot.parse_one(f"DATETIME_DIFF({b}, {a}, {unit})", read="bigquery"))
        for node in list(tree.find_all(exp.Escape)):
            if node.expression.name != "\\":
                raise NotPortable("LIKE ... ESCAPE with a character other than backslash")
            node.replace(node.this)
        for node in list(tree.find_all(exp.DataType)):
            if node.this == exp.DataType.Type.DECIMAL:
                node.replace(exp.DataType.build("BIGNUMERIC"))
    return tree


def to_engine(sql_or_tree: str | exp.Expression, engine: str, params: dict[str, Any] | None = None) -> str:
    """DuckDB SQL as `engine`'s SQL; raises NotPortable naming what does not translate."""
    if engine not in DIALECTS:
        raise NotPortable(f"unknown engine {engine!r}")
    tree = sqlglot.parse_one(sql_or_tree, read="duckdb") if isinstance(sql_or_tree, str) else sql_or_tree
    tree = inline_params(tree, params or {})
    if engine == "duckdb":
        return tree.sql(dialect="duckdb")
    tree = _rewrite(tree, engine)
    dialect = DIALECTS[engine]
    try:
        out = tree.sql(dialect=dialect, unsupported_level=ErrorLevel.RAISE)
    except UnsupportedError as e:
        raise NotPortable(str(e).splitlines()[0]) from None
    try:  # what we send must parse as the target dialect
        sqlglot.parse_one(out, read=dialect)
    except ParseError as e:
        raise NotPortable(f"the {engine} SQL does not parse: {str(e).splitlines()[0]}") from None
    return out
