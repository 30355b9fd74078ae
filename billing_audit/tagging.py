"""Run rules against the store and record their hits in ``rule_hits``.

Rules run on a sandboxed DuckDB connection (no file or network access,
configuration locked).  Rules of the simple form ``SELECT x_LineItemId, <reason>
FROM line_items WHERE <condition>`` are fused into one query, so all of them
cost one scan of ``line_items``; any other rule runs on its own.
"""

from __future__ import annotations

import copy
import os
import re
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, cast

import duckdb
from sqlglot import exp

from billing_audit.config import CHECKPOINT_NAME_PATTERNS, CHECKPOINT_TAG_KEYS, CHECKPOINT_TAG_VALUES
from billing_audit.errors import BillingAuditError
from billing_audit.rollup import build_groups
from billing_audit.rules import CATEGORIES, Rule, RuleError
from billing_audit.sql import lit

RULE_TABLES = [
    """CREATE TABLE IF NOT EXISTS rule_hits (
        x_LineItemId VARCHAR NOT NULL,
        rule_id VARCHAR NOT NULL,
        category VARCHAR NOT NULL,
        reason VARCHAR,
        run_id BIGINT NOT NULL)""",
    """CREATE TABLE IF NOT EXISTS tag_runs (
        run_id BIGINT PRIMARY KEY,
        started_at TIMESTAMP NOT NULL,
        rules VARCHAR[] NOT NULL,
        params VARCHAR,
        hits BIGINT NOT NULL)""",
]

# Each line's category for reports: the first in precedence order among its hits.
LINE_CATEGORY_VIEW = (
    "CREATE OR REPLACE VIEW line_categories AS "
    "SELECT x_LineItemId, arg_min(category, array_position("
    + "[" + ", ".join(f"'{c}'" for c in CATEGORIES) + "], category)) AS category, "
    "list(DISTINCT rule_id ORDER BY rule_id) AS rule_ids, list(DISTINCT category ORDER BY category) AS categories "
    "FROM rule_hits GROUP BY x_LineItemId"
)

DEFAULT_CHECKPOINT = {
    "tag_keys": list(CHECKPOINT_TAG_KEYS),
    "tag_values": list(CHECKPOINT_TAG_VALUES),
    "name_patterns": list(CHECKPOINT_NAME_PATTERNS),
    "resources": [],
}


@dataclass
class TagResult:
    run_id: int
    rules: list[str]
    hits_by_rule: dict[str, int] = field(default_factory=dict)
    scans: int = 0  # queries over line_items that were run

    @property
    def hits(self) -> int:
        return sum(self.hits_by_rule.values())


def sandbox(path: str) -> duckdb.DuckDBPyConnection:
    """A connection to the store that cannot read or write other files, with its configuration locked."""
    deadline = time.monotonic() + float(os.environ.get("BILLING_AUDIT_LOCK_TIMEOUT", "10"))
    while True:
        try:
            con = duckdb.connect(path, config={"enable_external_access": False})
            break
        except duckdb.IOException as e:
            if "Conflicting lock" not in str(e):
                raise
            if time.monotonic() >= deadline:
                raise BillingAuditError(f"{path}: the store is in use by another billing-audit process") from None
            time.sleep(0.2)
    from billing_audit.store import configure

    configure(con)
    con.execute("SET lock_configuration = true")
    return con


def checkpoint_sql(checkpoint: dict[str, Any] | None = None) -> str:
    """``checkpoint_resources``: the (provider, resource) pairs tagged, named or listed as checkpoint storage.
    Written with the config's lists as literals (no lambdas, no binds), so every engine runs the same SELECT."""
    cfg = {**DEFAULT_CHECKPOINT, **(checkpoint or {})}
    ors = []
    vals = ", ".join(lit(str(v).lower()) for v in cfg["tag_values"])
    if vals:
        ors += [f"LOWER(Tags[{lit(str(k).lower())}]) IN ({vals})" for k in cfg["tag_keys"]]
    ors += [f"LOWER(ResourceId) LIKE {lit(str(p).lower())} OR LOWER(COALESCE(ResourceName, '')) LIKE {lit(str(p).lower())}"
            for p in cfg["name_patterns"]]
    res = ", ".join(lit(str(r)) for r in cfg["resources"])
    if res:
        ors += [f"ResourceId IN ({res})", f"ResourceName IN ({res})"]
    cond = " OR ".join(f"({o})" for o in ors) or "FALSE"
    return f"SELECT DISTINCT x_Provider, ResourceId FROM line_items WHERE ResourceId IS NOT NULL AND ({cond})"


def prepare(con: duckdb.DuckDBPyConnection, checkpoint: dict[str, Any] | None = None) -> None:
    """Create the relations rules may read: line_items is there; checkpoint_resources is made here."""
    con.execute(f"CREATE OR REPLACE TEMP TABLE checkpoint_resources AS {checkpoint_sql(checkpoint)}")


def _renamed(rule: Rule) -> exp.Expression:
    """The rule's tree with $param renamed to $<id>__param so fused rules cannot collide."""
    assert rule.tree is not None
    tree = copy.deepcopy(rule.tree)
    for p in tree.find_all(exp.Placeholder):
        if p.name:
            p.set("this", f"{rule.id.lower()}__{p.name}")
    return cast(exp.Expression, tree)  # a checked rule is one SELECT (sqlglot types parse results as Expr)


def _fusable(tree: exp.Expression) -> tuple[exp.Expression, exp.Expression] | None:
    """(condition, reason) when the rule is a plain filter over line_items."""
    if not isinstance(tree, exp.Select) or tree.args.get("with"):
        return None
    for key in ("joins", "group", "having", "qualify", "order", "limit", "offset", "distinct", "windows", "laterals"):
        if tree.args.get(key):
            return None
    src = tree.args.get("from_") or tree.args.get("from")
    if src is None or not isinstance(src.this, exp.Table) or src.this.name.lower() != "line_items" or src.this.alias:
        return None
    reason = None
    for e in tree.expressions:
        if e.alias_or_name.lower() == "reason":
            reason = e.this if isinstance(e, exp.Alias) else e
        if e.find(exp.Window) or e.find(exp.AggFunc):
            return None
    if reason is None:
        return None
    where = tree.args.get("where")
    cond = where.this if where is not None else exp.true()
    return cond, reason


def _bind(rule: Rule, overrides: dict[str, Any]) -> dict[str, Any]:
    values = rule.defaults()
    values.update({k: v for k, v in overrides.items() if k in values})
    used = {p.name for p in (rule.tree.find_all(exp.Placeholder) if rule.tree else []) if p.name}
    return {f"{rule.id.lower()}__{k}": v for k, v in values.items() if k in used}


def check_binds(con: duckdb.DuckDBPyConnection, rule: Rule, overrides: dict[str, Any] | None = None) -> None:
    """Bind the rule against the store's schema: unknown columns and type errors come out here."""
    sql = _renamed(rule).sql(dialect="duckdb")
    try:
        con.execute(f"DESCRIBE {sql}", _bind(rule, overrides or {}))
    except duckdb.Error as e:
        raise _rule_error(rule, e) from None


def _rule_error(rule: Rule, e: Exception) -> RuleError:
    msg = str(e).strip()
    msg = re.sub(r"^[A-Za-z ]+Error: ", "", msg)
    first = msg.splitlines()[0] if msg else type(e).__name__
    first = re.sub(r"\$?\b[a-z]{2,5}[0-9]{3,4}__", "$", first)
    line = rule.sql_line
    # DuckDB points at the offending token: find it in the rule text for a file line.
    m = re.search(r'"([^"]+)" not found', first) or re.search(r"name (\w+) does not exist", first)
    if m:
        for i, text in enumerate(rule.sql.splitlines()):
            if m.group(1).lower() in text.lower():
                line = rule.sql_line + i
                break
    return RuleError(rule.path, line, first)


def run_rules(
    con: duckdb.DuckDBPyConnection,
    rules: Sequence[Rule],
    params: dict[str, Any] | None = None,
    checkpoint: dict[str, Any] | None = None,
) -> TagResult:
    """Run rules on a sandboxed connection and replace their previous hits, in one transaction."""
    params = params or {}
    for name in params:
        if not any(name in r.meta.params for r in rules):
            raise BillingAuditError(f"--param {name}: no selected rule has a parameter called {name!r}")
    for stmt in RULE_TABLES:
        con.execute(stmt)
    con.execute(LINE_CATEGORY_VIEW)
    prepare(con, checkpoint)
    for r in rules:
        check_binds(con, r, params)
    row = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM tag_runs").fetchone()
    run_id = int(row[0]) if row else 1
    result = TagResult(run_id=run_id, rules=[r.id for r in rules])
    fused: list[tuple[Rule, exp.Expression, exp.Expression]] = []
    alone: list[Rule] = []
    for r in rules:
        tree = _renamed(r)
        parts = _fusable(tree)
        if parts:
            fused.append((r, *parts))
        else:
            alone.append(r)
    # A rule is untrusted: a runaway query (a recursive CTE bomb, a cross join) is interrupted.
    timeout = float(os.environ.get("BILLING_AUDIT_RULE_TIMEOUT", "600"))
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("DELETE FROM rule_hits WHERE list_contains($ids, rule_id)", {"ids": [r.id for r in rules] or [""]})
        bound: dict[str, Any] = {"run_id": run_id}
        if fused:
            cases = []
            for r, cond, reason in fused:
                bound.update(_bind(r, params))
                cases.append(
                    f"CASE WHEN ({cond.sql(dialect='duckdb')}) THEN "
                    f"{{'rule_id': '{r.id}', 'category': '{r.category}', "
                    f"'reason': CAST(({reason.sql(dialect='duckdb')}) AS VARCHAR)}} END"
                )
            sql = (
                "INSERT INTO rule_hits SELECT x_LineItemId, h.rule_id, h.category, h.reason, $run_id FROM ("
                f"SELECT x_LineItemId, unnest(list_filter([{', '.join(cases)}], lambda x: x IS NOT NULL)) AS h "
                "FROM line_items)"
            )
            used = {k: v for k, v in bound.items() if f"${k}" in sql}
            try:
                con.execute(sql, used)
            except duckdb.InterruptException:
                raise BillingAuditError(f"the rules ran longer than {timeout:g} s and were stopped "
                                        "(BILLING_AUDIT_RULE_TIMEOUT)") from None
            except duckdb.Error as e:
                raise BillingAuditError(f"running the fused rules failed: {e}") from None
            result.scans += 1
        for r in alone:
            sql = (
                f"INSERT INTO rule_hits SELECT DISTINCT CAST(x_LineItemId AS VARCHAR), '{r.id}', '{r.category}', "
                f"CAST(reason AS VARCHAR), $run_id FROM ({_renamed(r).sql(dialect='duckdb')}) AS rule_output "
                "WHERE x_LineItemId IS NOT NULL"
            )
            try:
                con.execute(sql, {"run_id": run_id, **_bind(r, params)})
            except duckdb.InterruptException:
                raise RuleError(r.path, r.sql_line, f"the rule ran longer than {timeout:g} s and was stopped "
                                "(BILLING_AUDIT_RULE_TIMEOUT)") from None
            except duckdb.Error as e:
                raise _rule_error(r, e) from None
            result.scans += 1
        counts = con.execute(
            "SELECT rule_id, count(*) FROM rule_hits WHERE run_id = ? GROUP BY 1", [run_id]
        ).fetchall()
        result.hits_by_rule = {r.id: 0 for r in rules} | {k: int(v) for k, v in counts}
        con.execute(
            "INSERT INTO tag_runs VALUES (?, ?, ?, ?, ?)",
            [run_id, datetime.now(UTC).replace(tzinfo=None), [r.id for r in rules],
             repr(sorted(params.items())), result.hits],
        )
        try:  # the report's line groups, from every rule's hits (not only this run's)
            build_groups(con, run_id)
        except duckdb.InterruptException:
            raise BillingAuditError(f"grouping the tagged lines ran longer than {timeout:g} s and was stopped "
                                    "(BILLING_AUDIT_RULE_TIMEOUT)") from None
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    finally:
        timer.cancel()
    return result
