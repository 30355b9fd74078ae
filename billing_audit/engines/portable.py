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
from typing import Any, cast

import sqlglot
from sqlglot import exp
from sqlglot.errors import ErrorLevel, ParseError, UnsupportedError

DIALECTS = {"duckdb": "duckdb", "spark": "spark", "bigquery": "bigquery", "athena": "trino"}


def parse(sql: str, read: str) -> exp.Expression:
    """sqlglot.parse_one, typed as the Expression it returns."""
    return cast(exp.Expression, sqlglot.parse_one(sql, read=read))


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
        return parse(f"(SELECT tg.value FROM UNNEST({t}) AS tg WHERE tg.key = {k} LIMIT 1)", "bigquery")
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
    return parse(f"EXISTS(SELECT 1 FROM UNNEST({s}) AS {var} WHERE {b} IN UNNEST({r}))", "bigquery")


def _bq(sql: str) -> exp.Expression:
    return parse(sql, "bigquery")


def _lambda(node: exp.Expression) -> tuple[str, str, str]:
    """(variable, body, list) of ``list_transform``/``list_filter(L, lambda v: body)`` as BigQuery SQL."""
    lam = node.expression
    if not isinstance(lam, exp.Lambda) or len(lam.expressions) != 1:
        raise NotPortable(f"{node.sql(dialect='duckdb')}: only one-argument lambdas translate to BigQuery")
    return lam.expressions[0].name, lam.this.sql(dialect="bigquery"), node.this.sql(dialect="bigquery")


def _bigquery_lists(tree: exp.Expression) -> exp.Expression:
    """DuckDB list functions as BigQuery subqueries over UNNEST (kept in list order: WITH OFFSET)."""
    for n1 in list(tree.find_all(exp.Anonymous)):  # list_sum(list_transform(L, lambda v: E))
        if n1.name.lower() == "list_sum" and len(n1.expressions) == 1:
            arg = n1.expressions[0]
            var, body, src = _lambda(arg) if isinstance(arg, exp.Transform) else ("v", "v", arg.sql(dialect="bigquery"))
            n1.replace(_bq(f"(SELECT SUM({body}) FROM UNNEST({src}) AS {var})"))
    for n2 in list(tree.find_all(exp.Bracket)):  # list_filter(L, lambda v: C)[k]: the k-th match or NULL
        if isinstance(n2.this, exp.ArrayFilter) and len(n2.expressions) == 1 and n2.expressions[0].is_int:
            var, cond, src = _lambda(n2.this)
            k = int(n2.expressions[0].name)  # sqlglot keeps indexes 0-based whatever the dialect
            n2.replace(_bq(f"ARRAY(SELECT {var} FROM UNNEST({src}) AS {var} WITH OFFSET AS pos WHERE {cond} "
                             f"ORDER BY pos)[SAFE_OFFSET({k})]"))
    for n3 in list(tree.find_all(exp.Transform)):
        var, body, src = _lambda(n3)
        n3.replace(_bq(f"ARRAY(SELECT {body} FROM UNNEST({src}) AS {var} WITH OFFSET AS pos ORDER BY pos)"))
    for n4 in list(tree.find_all(exp.RegexpLike)):  # no flags argument: inline them
        flag = n4.args.get("flag")
        if flag is not None:
            if not (isinstance(flag, exp.Literal) and flag.is_string and set(flag.name) <= set("ims")):
                raise NotPortable("regexp_matches with options other than i, m, s")
            pat = n4.expression
            pattern = (exp.Literal.string(f"(?{flag.name}){pat.name}") if isinstance(pat, exp.Literal)
                       else exp.DPipe(this=exp.Literal.string(f"(?{flag.name})"), expression=pat.copy()))
            n4.replace(exp.RegexpLike(this=n4.this.copy(), expression=pattern))
    for n5 in list(tree.find_all(exp.Anonymous)):  # canonical times are DATETIME on BigQuery
        if n5.name.lower() == "try_strptime" and len(n5.expressions) == 2 and n5.expressions[1].is_string:
            value, fmt = (e.sql(dialect="bigquery") for e in n5.expressions)
            n5.replace(_bq(f"SAFE.PARSE_DATETIME({fmt}, {value})"))
    return tree


def _flagged(pattern: exp.Expression, flags: str, wrap: str = "{}") -> exp.Expression:
    """A pattern with DuckDB's regexp options ``i``/``m``/``s`` inlined as ``(?ims)`` (``wrap``: around it)."""
    if not set(flags) <= set("ims"):
        raise NotPortable(f"regular expression options {flags!r} other than g, i, m, s")
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        raise NotPortable("a regular expression with options that is not a literal")
    return exp.Literal.string((f"(?{flags})" if flags else "") + wrap.format(pattern.name))


def _java_rewrite(text: str, shift: int) -> str:
    """An RE2 replacement (``\\1``, ``\\\\``) as a Java one (``$1``, ``\\\\``, a literal ``$`` escaped), its group
    numbers moved up by ``shift``."""
    out, i = [], 0
    while i < len(text):
        c = text[i]
        if c == "\\" and i + 1 < len(text) and text[i + 1].isdigit():
            if text[i + 1] == "0":
                raise NotPortable("regexp_replace with \\0 (the whole match) in the replacement")
            out.append(f"${int(text[i + 1]) + shift}")
            i += 2
            continue
        if c == "\\" and i + 1 < len(text):
            out.append("\\" + text[i + 1])
            i += 2
            continue
        out.append("\\$" if c == "$" else c)
        i += 1
    return "".join(out)


def _spark_regexps(tree: exp.Expression) -> exp.Expression:
    """DuckDB's regexp options as Spark's: ``i``/``m``/``s`` inlined in the pattern (Spark takes no options), RE2
    backreferences as Java's, and a regexp_replace without ``g`` (DuckDB replaces the first match only, Spark every
    one) as one anchored replace: ``^(.*?)(?:p)`` -> ``$1r``, the leftmost match as DuckDB's."""
    for n1 in list(tree.find_all(exp.RegexpLike)):
        flag = n1.args.get("flag")
        if flag is not None:
            n1.replace(exp.RegexpLike(this=n1.this.copy(), expression=_flagged(n1.expression, flag.name)))
    for n2 in list(tree.find_all(exp.RegexpExtract)):
        params = n2.args.get("parameters")
        if params is not None:
            n2.set("expression", _flagged(n2.expression, params.name.replace("c", "")))
            n2.set("parameters", None)
    for n3 in list(tree.find_all(exp.RegexpReplace)):
        mods = n3.args.get("modifiers")
        flags = "" if mods is None else mods.name.replace("c", "")
        repl = n3.args.get("replacement")
        if not (isinstance(repl, exp.Literal) and repl.is_string):
            raise NotPortable("regexp_replace with a replacement that is not a literal")
        first = bool(n3.args.get("single_replace")) and "g" not in flags  # as DuckDB parsed it: first match only
        pattern = _flagged(n3.expression, flags.replace("g", "") + ("s" if first else ""),
                           "^(.*?)(?:{})" if first else "{}")
        text = ("$1" if first else "") + _java_rewrite(repl.name, 1 if first else 0)
        n3.replace(exp.RegexpReplace(this=n3.this.copy(), expression=pattern, replacement=exp.Literal.string(text)))
    return tree


def _rewrite(tree: exp.Expression, engine: str) -> exp.Expression:
    for n0 in list(tree.find_all(exp.DataType)):  # HUGEINT (1e-12 units, billing_audit.kubernetes): exact decimals
        if n0.this == exp.DataType.Type.INT128:
            n0.replace(exp.DataType.build("DECIMAL(38,0)"))
    for n6 in list(tree.find_all(exp.Bracket)):  # innermost first does not matter: keys are plain
        if _is_tags(n6.this) and len(n6.expressions) == 1:
            n6.replace(_tag_lookup(n6.this, n6.expressions[0], engine))
    for n7 in list(tree.find_all(exp.ArrayOverlaps)):
        n7.replace(_overlap(n7, engine))
    if engine == "spark":
        tree = _spark_regexps(tree)
    if engine == "bigquery":
        tree = _bigquery_lists(tree)
        for n8 in list(tree.find_all(exp.ConcatWs)):  # no CONCAT_WS; ARRAY_TO_STRING skips NULLs like DuckDB
            sep, *parts = n8.expressions
            n8.replace(exp.Anonymous(this="ARRAY_TO_STRING",
                                       expressions=[exp.Array(expressions=[p.copy() for p in parts]), sep.copy()]))
        for n9 in list(tree.find_all(exp.DateDiff)):  # the canonical times are DATETIME on BigQuery
            unit = (n9.text("unit") or "DAY").upper()
            a, b = n9.expression.sql(dialect="bigquery"), n9.this.sql(dialect="bigquery")
            n9.replace(parse(f"DATETIME_DIFF({b}, {a}, {unit})", "bigquery"))
        for n10 in list(tree.find_all(exp.Escape)):
            if n10.expression.name != "\\":
                raise NotPortable("LIKE ... ESCAPE with a character other than backslash")
            n10.replace(n10.this)
        for n11 in list(tree.find_all(exp.DataType)):
            if n11.this == exp.DataType.Type.DECIMAL:
                n11.replace(exp.DataType.build("BIGNUMERIC"))
    return tree


def to_engine(sql_or_tree: str | exp.Expression, engine: str, params: dict[str, Any] | None = None) -> str:
    """DuckDB SQL as `engine`'s SQL; raises NotPortable naming what does not translate."""
    if engine not in DIALECTS:
        raise NotPortable(f"unknown engine {engine!r}")
    tree = parse(sql_or_tree, "duckdb") if isinstance(sql_or_tree, str) else sql_or_tree
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
