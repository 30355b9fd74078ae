"""The fused rule scan's regular expressions, evaluated once per distinct description instead of once per line.

The built-in rules match ``REGEXP_MATCHES(<text>, '<pattern>')`` where the text is made of a line's description
columns (usage type, charge description, SKU meter, service) by plain string functions.  A month of millions of
lines holds a few hundred distinct such descriptions (629 in the generated 1M-line AWS month), so
:func:`memoized` writes the distinct tuples of those columns to a temp table ``ba_memo`` with one boolean per
distinct (text, pattern), and the fused scan joins it back (``IS NOT DISTINCT FROM``: NULL descriptions match
their own row) and reads the boolean where the rule had the call.  Any other regular expression (a pattern that is
not a literal, a text built from other columns or with other functions) stays in the scan as it was.
"""

from __future__ import annotations

from typing import TypeVar

import duckdb
from sqlglot import exp

# the columns a memoized text may be built from: what describes the charge, a few hundred values per month
DESCRIPTION_COLUMNS = ("x_UsageType", "ChargeDescription", "SkuMeter", "ServiceName", "ServiceCategory",
                       "x_Operation", "x_LineItemType")
_BY_LOWER = {c.lower(): c for c in DESCRIPTION_COLUMNS}
# the functions a memoized text may use: deterministic, of their arguments only
_PLAIN = (exp.Lower, exp.Upper, exp.Coalesce, exp.ConcatWs, exp.Concat, exp.DPipe, exp.Trim, exp.Paren)
# the memo is used while it is this small against the lines (else the scan evaluates each call per line)
MAX_SHARE = 0.25

R = TypeVar("R")  # the rule, as tagging fuses it: (rule, condition, reason)


def _text_columns(node: exp.Expression) -> set[str] | None:
    """The description columns the text ``node`` is made of, or None when it is anything else."""
    cols: set[str] = set()
    for n in node.walk():
        if isinstance(n, exp.Column):
            if (n.table and n.table.lower() != "line_items") or n.name.lower() not in _BY_LOWER:
                return None
            cols.add(_BY_LOWER[n.name.lower()])
        elif isinstance(n, exp.Literal):
            if not n.is_string:
                return None
        elif not isinstance(n, (*_PLAIN, exp.Identifier)):
            return None
    return cols


def _memo_call(node: exp.Expression) -> set[str] | None:
    """The columns of a ``REGEXP_MATCHES(text, 'literal' [, 'flags'])`` whose text :func:`_text_columns` accepts."""
    if not isinstance(node, exp.RegexpLike):
        return None
    pattern, flag = node.expression, node.args.get("flag")
    if not (isinstance(pattern, exp.Literal) and pattern.is_string):
        return None
    if flag is not None and not (isinstance(flag, exp.Literal) and flag.is_string):
        return None
    return _text_columns(node.this)


def memoized(con: duckdb.DuckDBPyConnection, part: list[tuple[R, exp.Expression, exp.Expression]],
             lines: int, source: str = "line_items") -> tuple[list[tuple[R, exp.Expression, exp.Expression]], str] | None:
    """``part`` (the fused rules) with each memoizable regular expression read from ``ba_memo``, and the relation
    to scan (``source``, the lines scanned, named ``line_items``: the table or a subquery aliased so, joined to the
    memo); ``lines``: how many lines ``source`` holds.  None when no call is memoizable or the memo would not be
    small (then nothing was created).  Call inside the tag run's transaction; drop ``ba_memo`` after the scan."""
    calls: dict[str, int] = {}  # the call's SQL -> its boolean's number
    cols: set[str] = set()
    for _, cond, reason in part:
        for tree in (cond, reason):
            for n in tree.walk():
                found = _memo_call(n) if isinstance(n, exp.Expression) else None
                if found is not None:
                    calls.setdefault(n.sql(dialect="duckdb"), len(calls))
                    cols |= found
    if not calls or not cols:
        return None
    keys = [c for c in DESCRIPTION_COLUMNS if c in cols]
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_memo_keys AS SELECT DISTINCT {', '.join(keys)} FROM {source}")
    row = con.execute("SELECT count(*) FROM ba_memo_keys").fetchone()
    if row is None or row[0] > max(1000, lines * MAX_SHARE):
        con.execute("DROP TABLE ba_memo_keys")
        return None
    renames = ", ".join(f"{c} AS ba_d{i}" for i, c in enumerate(keys))
    booleans = ", ".join(f"{sql} AS ba_m{i}" for sql, i in calls.items())
    # the calls as the rules wrote them (a column may be qualified line_items.x), over the distinct descriptions
    con.execute(f"CREATE OR REPLACE TEMP TABLE ba_memo AS SELECT {renames}, {booleans} FROM ba_memo_keys AS line_items")
    con.execute("DROP TABLE ba_memo_keys")

    def read_memo(n: exp.Expression) -> exp.Expression:
        if _memo_call(n) is not None:
            return exp.column(f"ba_m{calls[n.sql(dialect='duckdb')]}", table="ba_m")
        return n

    rewritten = [(r, cond.transform(read_memo), reason.transform(read_memo)) for r, cond, reason in part]
    on = " AND ".join(f"line_items.{c} IS NOT DISTINCT FROM ba_m.ba_d{i}" for i, c in enumerate(keys))
    return rewritten, f"{source} LEFT JOIN ba_memo ba_m ON {on}"
