"""Run rules against the store and record their hits in ``rule_hits``.

Rules run on a sandboxed DuckDB connection (no file or network access,
configuration locked).  Rules of the simple form ``SELECT x_LineItemId, <reason>
FROM line_items WHERE <condition>`` are fused into one query, so all of them
cost one scan of ``line_items``; any other rule runs on its own.  In a full run that scan reads the rules' regular
expressions over description columns from a memo of the distinct descriptions (:mod:`billing_audit.tagmemo`).
"""

from __future__ import annotations

import contextlib
import copy
import os
import re
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, cast

import duckdb
from sqlglot import exp

from billing_audit import tagmemo
from billing_audit.config import CHECKPOINT_NAME_PATTERNS, CHECKPOINT_TAG_KEYS, CHECKPOINT_TAG_VALUES
from billing_audit.ddl import LINE_CATEGORY_VIEW, RULE_TABLES
from billing_audit.errors import BillingAuditError
from billing_audit.rollup import build_groups, lines_signature
from billing_audit.rules import Rule, RuleError
from billing_audit.sql import lit

DEFAULT_CHECKPOINT = {
    "tag_keys": list(CHECKPOINT_TAG_KEYS),
    "tag_values": list(CHECKPOINT_TAG_VALUES),
    "name_patterns": list(CHECKPOINT_NAME_PATTERNS),
    "resources": [],
}


@dataclass
class RuleRun:
    """One untrusted rule's bounded run in its child process (:mod:`billing_audit.rulebox`)."""

    rule: Rule
    hits_file: Path | None  # the DuckDB file holding its hits (x_LineItemId, reason), when it succeeded
    rows: int = 0
    error: RuleError | None = None
    peak_rss: int = 0  # the child's peak resident memory, bytes
    seconds: float = 0.0


@dataclass
class TagResult:
    run_id: int
    rules: list[str]  # the rules whose hits this run recorded
    hits_by_rule: dict[str, int] = field(default_factory=dict)
    scans: int = 0  # queries over line_items that were run
    failed: list[RuleError] = field(default_factory=list)  # user rules that failed: reported, skipped
    bounded: dict[str, RuleRun] = field(default_factory=dict)  # the user rules' bounded runs, by rule id
    unchanged: bool = False  # nothing the run's state is computed from changed: nothing was redone (run_id's state)
    slices: int = 0  # with unchanged: the slices (provider x billing account x billing period) the state covers
    plan: Any = None  # incremental.Plan when only the changed slices were redone (None: everything was)

    @property
    def hits(self) -> int:
        return sum(self.hits_by_rule.values())


# Bumped when what a tag run writes changes meaning in a way no version below says (a rule-hit, spot_od, group or
# search-index rule): a run recorded with another state key is redone.  2: checkpoint_slices kept per slice.
# 3: the ingest drops the spot_od rows of the lines it removes (one full re-tag drops those an older one left).
# 4: a bill-priced spot_od row holds no price_ref or price_as_of (pricing.line says them from spot_bill).
# 5: spot_od holds no row of a spot line the export prices (pricing.od_rows_sql gives it from the line).
TAG_STATE_VERSION = 5


def state_key(rules: Sequence[Rule], params: dict[str, Any], checkpoint: dict[str, Any] | None) -> str:
    """What a tag run's state is computed from besides the lines and the price references: each rule (id,
    category, trust, SQL) with the parameter values it binds (its defaults, the config's checkpoint keys, --param),
    the checkpoint config as the SQL of ``checkpoint_resources``, the connectors' pricing SQL and the code's
    versions.  Line groups and the search index depend on nothing else (the attribution config is read at report
    time).  A hex digest: equal keys over equal lines and references give equal rule_hits, spot_od, groups, index."""
    import hashlib
    import json
    from importlib import metadata

    from billing_audit import pricing
    from billing_audit.rollup import GROUPS_VERSION

    try:
        version = metadata.version("billing-audit")
    except metadata.PackageNotFoundError:  # run from a source tree that was never installed
        version = "?"
    doc = {
        "versions": [version, TAG_STATE_VERSION, GROUPS_VERSION],
        "rules": sorted([r.id, r.category, r.builtin, r.sql, repr(sorted(_bind(r, params).items()))] for r in rules),
        "checkpoint": checkpoint_sql(checkpoint),
        "pricing": pricing.logic_sql(),
    }
    return hashlib.sha256(json.dumps(doc, sort_keys=True, default=repr).encode()).hexdigest()


def unchanged_run(con: duckdb.DuckDBPyConnection, key: str) -> tuple[int, int] | None:
    """(run id, slices) of the latest tag run when redoing it would change nothing: it completed over exactly the
    lines stored now (:func:`~billing_audit.rollup.completed_tag_run`), with state key ``key`` (a run where a rule
    failed records none), the price references held now, and its line groups and search index are there and
    current.  None: a tag run is needed."""
    from billing_audit.pricing import prices_key
    from billing_audit.rollup import completed_tag_run, current_groups

    have = {r[0] for r in con.execute(
        "SELECT column_name FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name = 'tag_runs'").fetchall()}
    if not {"state_key", "prices_key", "lines_sig"} <= have:
        return None
    run_id = completed_tag_run(con)
    if run_id is None or current_groups(con) is None:
        return None
    tables = {r[0] for r in con.execute(
        "SELECT table_name FROM duckdb_tables() WHERE database_name = current_database() AND schema_name = 'main' "
        "AND table_name IN ('search_index', 'search_texts', 'spot_od', 'slices')").fetchall()}
    if len(tables) < 4:
        return None
    row = con.execute("SELECT state_key, prices_key FROM tag_runs WHERE run_id = ?", [run_id]).fetchone()
    if row is None or row[0] != key or row[1] != prices_key(con):
        return None
    n = con.execute("SELECT count(*) FROM slices").fetchone()
    return run_id, int(n[0]) if n else 0


def unchanged_message(run_id: int, slices: int) -> str:
    return (f"tag: nothing changed since tag run {run_id} ({slices:,} slice{'' if slices == 1 else 's'}); "
            "--force re-tags")


def _size(value: str) -> int:
    """'1536MB', '2GB', '1.5GiB', '800000000' as bytes."""
    m = re.fullmatch(r"\s*([0-9.]+)\s*([KMGT]?)(i?B)?\s*", value, re.IGNORECASE)
    if not m:
        raise BillingAuditError(f"cannot read {value!r} as a size (e.g. 1536MB, 2GB)")
    scale = 1024 ** " KMGT".index(m.group(2).upper() or " ")
    return int(float(m.group(1)) * scale)


@dataclass(frozen=True)
class RuleLimits:
    """What bounds one user rule's run: wall time (binding included), address space, spill to disk."""

    timeout: float
    memory: int  # bytes of address space (RLIMIT_AS) for the child running the rule
    disk: int  # bytes DuckDB may spill to its temp directory

    @classmethod
    def from_env(cls) -> RuleLimits:
        return cls(float(os.environ.get("BILLING_AUDIT_RULE_TIMEOUT", "600")),
                   _size(os.environ.get("BILLING_AUDIT_RULE_MEMORY", "1536MB")),
                   _size(os.environ.get("BILLING_AUDIT_RULE_DISK", "2GB")))


def run_user_rule(store: str, rule: Rule, params: dict[str, Any], checkpoint: dict[str, Any] | None,
                  workdir: Path, limits: RuleLimits | None = None) -> RuleRun:
    """Run one untrusted rule in a child process over a read-only view of the store (see
    :mod:`billing_audit.rulebox`): memory capped, time bounded from before binding, spill bounded.  The store
    must not be open read-write meanwhile.  Never raises for the rule's own failure: ``RuleRun.error`` says it."""
    import json
    import subprocess
    import sys

    from billing_audit import rulebox

    lim = limits or RuleLimits.from_env()
    folder = workdir / rule.id
    folder.mkdir(parents=True)
    (folder / "tmp").mkdir()
    threads = int(os.environ.get("BILLING_AUDIT_THREADS", os.cpu_count() or 2))
    spec = {
        "store": str(Path(store).resolve()), "out": str(folder / "hits.duckdb"), "result": str(folder / "result.json"),
        "temp_dir": str(folder / "tmp"), "max_temp": f"{lim.disk // (1 << 20)}MiB",
        "mem_bytes": lim.memory, "memory_limit": f"{max(64, lim.memory // 3 // (1 << 20))}MiB", "threads": threads,
        "lock_timeout": float(os.environ.get("BILLING_AUDIT_LOCK_TIMEOUT", "10")),
        "checkpoint_sql": checkpoint_sql(checkpoint), "sql": _renamed(rule).sql(dialect="duckdb"),
        "params": _bind(rule, params),
    }
    started = time.monotonic()
    proc = subprocess.Popen([sys.executable, "-I", rulebox.__file__], stdin=subprocess.PIPE,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    assert proc.stdin is not None and proc.stderr is not None
    try:
        proc.stdin.write(json.dumps(spec, default=str).encode())
        proc.stdin.close()
    except BrokenPipeError:
        pass
    status, usage = 0, None
    timed_out = False
    while True:  # wait4, not Popen.wait: its resource usage is this child's peak memory
        pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
        if pid:
            break
        if time.monotonic() - started > lim.timeout:
            proc.kill()
            _, status, usage = os.wait4(proc.pid, 0)
            timed_out = True
            break
        time.sleep(0.02)
    proc.returncode = os.waitstatus_to_exitcode(status)
    stderr = proc.stderr.read().decode(errors="replace")[-2000:]
    proc.stderr.close()
    run = RuleRun(rule, None, peak_rss=(usage.ru_maxrss * 1024) if usage else 0,
                  seconds=time.monotonic() - started)
    mib = lim.memory // (1 << 20)
    result: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):
        result = json.loads((folder / "result.json").read_text())
    if timed_out:
        run.error = RuleError(rule.path, rule.sql_line, f"the rule ran longer than {lim.timeout:g} s and was stopped "
                              "(BILLING_AUDIT_RULE_TIMEOUT)")
    elif result.get("ok"):
        run.hits_file, run.rows = folder / "hits.duckdb", int(result.get("rows", 0))
    elif result.get("kind") == "oom" or (not result and proc.returncode in (-6, -9, 134, 137)):
        run.error = RuleError(rule.path, rule.sql_line, f"the rule needed more than its {mib} MiB of memory and was "
                              f"stopped (BILLING_AUDIT_RULE_MEMORY): {result.get('error', 'killed')}")
    elif result.get("kind") == "error":
        run.error = _rule_error(rule, Exception(str(result.get("error"))))
    elif result:
        run.error = RuleError(rule.path, None, str(result.get("error")))
    else:
        last = stderr.strip().splitlines()[-1] if stderr.strip() else f"exit code {proc.returncode}"
        run.error = RuleError(rule.path, rule.sql_line, f"the rule's process failed: {last}")
    return run


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

    configure(con, write=True)
    con.execute("SET lock_configuration = true")
    return con


def checkpoint_sql(checkpoint: dict[str, Any] | None = None, by_slice: bool = False) -> str:
    """``checkpoint_resources``: the (provider, resource) pairs tagged, named or listed as checkpoint storage.
    Written with the config's lists as literals (no lambdas, no binds), so every engine runs the same SELECT.
    ``by_slice``: per slice instead (provider, account, billing month, resource; :mod:`billing_audit.incremental`
    keeps them so that a run redoes the changed slices' only)."""
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
    cols = ("x_Provider, BillingAccountId, date_trunc('month', BillingPeriodStart + INTERVAL 14 DAY) AS "
            "BillingPeriodStart, ResourceId" if by_slice else "x_Provider, ResourceId")
    return f"SELECT DISTINCT {cols} FROM line_items WHERE ResourceId IS NOT NULL AND ({cond})"


def prepare(con: duckdb.DuckDBPyConnection, checkpoint: dict[str, Any] | None = None, plan: Any = None) -> None:
    """Create the relations rules may read: line_items is there; checkpoint_resources is made here, from the
    store's per-slice table of them (:func:`billing_audit.incremental.checkpoint_resources`: with a ``plan``, the
    changed slices' part only is redone)."""
    from billing_audit import incremental

    incremental.checkpoint_resources(con, checkpoint_sql(checkpoint, by_slice=True), plan)


def _renamed(rule: Rule) -> exp.Expression:
    """The rule's tree with $param renamed to $<id>__param so fused rules cannot collide."""
    assert rule.tree is not None
    tree = copy.deepcopy(rule.tree)
    for p in tree.find_all(exp.Placeholder):
        if p.name:
            p.set("this", f"{rule.id.lower()}__{p.name}")
    return cast(exp.Expression, tree)  # a checked rule is one SELECT (sqlglot types parse results as Expr)


# The only parts a fusable SELECT may have: a select list, FROM line_items and a WHERE.  A whitelist, so an argument
# sqlglot adds or renames (it stores WITH as "with_" since sqlglot 30) can only make a rule run on its own.
_FUSABLE_ARGS = {"expressions", "from_", "where"}
# Anything below the select list or the WHERE that changes which rows exist or reads another relation.
_NOT_FUSABLE = (exp.Query, exp.Subquery, exp.CTE, exp.With, exp.Table, exp.Join, exp.Lateral, exp.Unnest,
                exp.Explode, exp.UDTF, exp.Window, exp.AggFunc, exp.Star)


def _checkpoint_list(node: exp.Expr) -> bool:
    """``(SELECT <column> FROM checkpoint_resources)`` as the list of an IN: uncorrelated, over the documented
    relation only (no CTE, no other table, no alias), so it means the same inside the fused scan."""
    if not isinstance(node, exp.Subquery) or not isinstance(node.parent, exp.In) or node.parent.args.get("query") is not node:
        return False
    q = node.this
    if not isinstance(q, exp.Select) or any(v not in (None, False, [], "") for k, v in q.args.items()
                                             if k not in ("expressions", "from_")):
        return False
    src = q.args.get("from_")
    table = src.this if isinstance(src, exp.From) else None
    return (isinstance(table, exp.Table) and isinstance(table.this, exp.Identifier)
            and table.name.lower() == "checkpoint_resources" and not any(v for k, v in table.args.items() if k != "this")
            and len(q.expressions) == 1 and isinstance(q.expressions[0], exp.Column) and not q.expressions[0].table)


def _fusable(tree: exp.Expression) -> tuple[exp.Expression, exp.Expression] | None:
    """(condition, reason) when the rule is, by its parsed meaning, ``SELECT x_LineItemId, <reason> FROM
    line_items [WHERE <condition>]``: no CTE, no subquery, no set operation, exactly one table (``line_items``,
    unaliased, unqualified), no join, lateral, unnest, window, aggregate, DISTINCT, GROUP BY, QUALIFY, ORDER or
    LIMIT, and ``x_LineItemId`` the line's own column.  Only such a rule means the same inside the fused scan."""
    if not isinstance(tree, exp.Select):
        return None
    if any(v not in (None, False, [], "") for k, v in tree.args.items() if k not in _FUSABLE_ARGS):
        return None
    src = tree.args.get("from_")
    table = src.this if isinstance(src, exp.From) else None
    if (not isinstance(table, exp.Table) or not isinstance(table.this, exp.Identifier)
            or table.name.lower() != "line_items" or table.alias or table.args.get("db") or table.args.get("catalog")
            or any(v for k, v in table.args.items() if k != "this")):
        return None
    where = tree.args.get("where")
    parts = list(tree.expressions) + ([where] if where is not None else [])
    for part in parts:
        if any(isinstance(n, _NOT_FUSABLE) and not _checkpoint_list(n) for n in part.walk(prune=_checkpoint_list)):
            return None
        for col in part.find_all(exp.Column):
            if col.table and col.table.lower() != "line_items":
                return None
    reason = None
    ident = None
    for e in tree.expressions:
        name = e.alias_or_name.lower()
        if name == "reason":
            reason = e.this if isinstance(e, exp.Alias) else e
        elif name == "x_lineitemid":
            ident = e
    if reason is None or not (isinstance(ident, exp.Column) and ident.name.lower() == "x_lineitemid"):
        return None
    cond = where.this if where is not None else exp.true()
    return cond, reason


# A scan fuses at most this many rules into one bit mask (a BIGINT's bits); more are fused without one.
MASK_RULES = 62


def fused_scan_sql(part: Sequence[tuple[Rule, exp.Expression, exp.Expression]], source: str) -> str:
    """One scan of ``source`` (the lines, named ``line_items``, perhaps joined to the memo ``ba_m``) for the fused
    rules ``part`` (rule, condition, reason): a row (x_LineItemId, h) per hit, ``h`` the struct of rule id, category
    and reason.  Each line's conditions are evaluated once, into a bit mask; only the lines some rule hits (about
    two in five of a bill) then build the list of hits and their reasons (1M lines: the scan 0.68-0.71 -> 0.47-0.62
    s, the same hits).  A condition that is NULL is not a hit, as in a CASE."""
    masked = len(part) <= MASK_RULES
    cases = []
    for i, (r, cond, reason) in enumerate(part):
        if masked:  # the memo's columns are the subquery's own below (named line_items), as the line's are
            reason = reason.copy()
            for col in reason.find_all(exp.Column):
                if col.table == "ba_m":
                    col.set("table", exp.to_identifier("line_items"))
        test = f"(ba_mask & {1 << i}) <> 0" if masked else f"({cond.sql(dialect='duckdb')})"
        cases.append(f"CASE WHEN {test} THEN {_hit_struct(r, reason)} END")
    if masked:
        mask = " + ".join(f"(CASE WHEN ({cond.sql(dialect='duckdb')}) THEN {1 << i} ELSE 0 END)"
                          for i, (_, cond, _) in enumerate(part))
        source = f"(SELECT *, CAST({mask} AS BIGINT) AS ba_mask FROM {source}) AS line_items WHERE ba_mask <> 0"
    return (f"SELECT x_LineItemId, unnest(list_filter([{', '.join(cases)}], lambda x: x IS NOT NULL)) AS h "
            f"FROM {source}")


def _hit_struct(r: Rule, reason: exp.Expression) -> str:
    return (f"{{'rule_id': '{r.id}', 'category': '{r.category}', "
            f"'reason': CAST(({reason.sql(dialect='duckdb')}) AS VARCHAR)}}")


@contextlib.contextmanager
def _fused_errors(timeout: float) -> Iterator[None]:
    """The fused scan's DuckDB errors as one message each: stopped by the rule timeout, or failed."""
    try:
        yield
    except duckdb.InterruptException:
        raise BillingAuditError(f"the rules ran longer than {timeout:g} s and were stopped "
                                "(BILLING_AUDIT_RULE_TIMEOUT)") from None
    except duckdb.Error as e:
        raise BillingAuditError(f"running the fused rules failed: {e}") from None


def _count(con: duckdb.DuckDBPyConnection) -> int:
    row = con.execute("SELECT count(*) FROM line_items").fetchone()
    return int(row[0]) if row else 0


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
    user_runs: Sequence[RuleRun] = (),
    expect_sig: str | None = None,
    key: str | None = None,
    force: bool = False,
) -> TagResult:
    """Run the built-in (trusted) rules on a sandboxed connection and record their hits with the hits of the user
    rules' bounded runs (``user_runs``, from :func:`run_user_rule`), replacing those rules' previous hits, in one
    transaction with the tag run's row, the line groups and the search index.  A user rule that failed is reported
    in ``failed`` and skipped.  ``expect_sig``: the lines' signature the user rules ran over.  ``key``: the
    :func:`state_key` the run records (with the price references it priced with), unless a user rule failed.
    With the key of the last run and its state kept, only the slices whose lines changed are redone
    (:mod:`billing_audit.incremental`); ``force``: everything is."""
    params = params or {}
    untrusted = [r.id for r in rules if not r.builtin]
    if untrusted:
        raise BillingAuditError(f"rules {', '.join(untrusted)} are not built-in: they run bounded (run_user_rule)")
    ran_users = [u for u in user_runs if u.error is None]
    # A rule is untrusted: a runaway query (a recursive CTE bomb, a cross join) is interrupted.  The timer starts
    # before anything is bound: binding a rule's parameters is work too.
    timeout = float(os.environ.get("BILLING_AUDIT_RULE_TIMEOUT", "600"))
    timer = threading.Timer(timeout, con.interrupt)
    timer.daemon = True
    timer.start()
    # Everything a tag run writes (tables, view, hits, its tag_runs row, line groups, search index) is written in
    # this one transaction: a failure, a kill or a full disk leaves the store as it was, and `report` finds no
    # completed run rather than an empty one.
    con.execute("BEGIN TRANSACTION")
    try:
        for stmt in RULE_TABLES:
            con.execute(stmt)
        con.execute(LINE_CATEGORY_VIEW)
        from billing_audit import incremental

        # Incremental by slice: the last run's state, kept where the lines did not change (billing_audit.incremental)
        plan = None if key is None or force else incremental.plan(con, key)
        prepare(con, checkpoint, plan)
        ckpt = incremental.checkpoint_key(con)
        if plan is not None:
            plan.checkpoint_same = plan.checkpoint_was == ckpt
        try:
            for r in rules:
                check_binds(con, r, params)
        except RuleError as e:
            if "INTERRUPT" in e.reason.upper():
                raise BillingAuditError(f"binding the rules took longer than {timeout:g} s") from None
            raise
        sig = lines_signature(con)
        if expect_sig is not None and sig != expect_sig:
            raise BillingAuditError("the store's lines changed while the rules ran (another process ingested): "
                                    "run `billing-audit tag` again")
        row = con.execute("SELECT coalesce(max(run_id), 0) + 1 FROM tag_runs").fetchone()
        run_id = int(row[0]) if row else 1
        last = con.execute("SELECT lines_sig FROM tag_runs ORDER BY run_id DESC LIMIT 1").fetchone()
        recorded = [r.id for r in rules] + [u.rule.id for u in ran_users]
        result = TagResult(run_id=run_id, rules=recorded, failed=[u.error for u in user_runs if u.error is not None],
                           bounded={u.rule.id: u for u in user_runs})
        fused: list[tuple[Rule, exp.Expression, exp.Expression]] = []
        alone: list[Rule] = []
        for r in rules:
            tree = _renamed(r)
            parts = _fusable(tree)
            if parts:
                fused.append((r, *parts))
            else:
                alone.append(r)
        result.plan = plan
        # the fused rules whose hits are each line's own: only the changed slices' lines are scanned for them
        local = [f for f in fused if plan is not None and incremental.line_local(f[0], plan)]
        local_ids = [f[0].id for f in local]
        # Hits of rules this run does not run are kept while the lines are those the last run tagged (a narrower
        # selection over the same lines, or a run for new price references); over changed lines they describe other
        # lines and go (README "Rules").  The same in both paths, so an incremental run keeps what a full one keeps.
        stale = last is not None and last[0] != sig
        if plan is not None:
            plan.snapshot(con, local_ids)
            if stale:
                con.execute("DELETE FROM rule_hits WHERE NOT list_contains($ids, rule_id)", {"ids": recorded or [""]})
            con.execute("DELETE FROM rule_hits WHERE list_contains($ids, rule_id) AND NOT list_contains($local, rule_id)",
                        {"ids": recorded or [""], "local": local_ids or [""]})
            if local_ids:  # the hits of lines that are gone went with them (the ingest that removed them)
                con.execute("DELETE FROM rule_hits WHERE list_contains($local, rule_id) AND x_LineItemId IN "
                            f"(SELECT x_LineItemId FROM ba_dirty_lines) AND {incremental.IN_IDS.format(t='rule_hits')}",
                            {"local": local_ids, **incremental.id_bounds(con, "ba_dirty_lines")})
            con.execute("DROP TABLE IF EXISTS ba_dirty_lines")  # read no more: its memory is the run's
        else:
            if stale:
                con.execute("DELETE FROM rule_hits")
            con.execute("DELETE FROM rule_hits WHERE list_contains($ids, rule_id)", {"ids": recorded or [""]})
        scans = [(local, plan.source if plan else ""), ([f for f in fused if f[0].id not in local_ids], "line_items")]
        for part, source in scans:
            if not part:
                continue
            # the scan's regular expressions once per distinct description (of every line, or of the changed
            # slices' lines: plan.source, aliased line_items)
            with _fused_errors(timeout):
                memo = tagmemo.memoized(con, part, _count(con) if plan is None or source == "line_items" else plan.lines,
                                        source)
                if memo is not None:
                    part, source = memo
            bound: dict[str, Any] = {"run_id": run_id}
            for r, _, _ in part:
                bound.update(_bind(r, params))
            sql = "INSERT INTO rule_hits SELECT x_LineItemId, h.rule_id, h.category, h.reason, $run_id FROM " \
                  f"({fused_scan_sql(part, source)})"
            used = {k: v for k, v in bound.items() if f"${k}" in sql}
            with _fused_errors(timeout):
                con.execute(sql, used)
            if memo is not None:
                con.execute("DROP TABLE ba_memo")
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
        for u in ran_users:  # the user rules' hits, from the files their bounded runs wrote
            assert u.hits_file is not None
            src = duckdb.connect(str(u.hits_file), read_only=True)
            try:
                con.register("ba_user_hits", src.sql("SELECT x_LineItemId, reason FROM hits").to_arrow_reader())
                con.execute(f"INSERT INTO rule_hits SELECT x_LineItemId, {lit(u.rule.id)}, {lit(u.rule.category)}, "
                            "reason, $run_id FROM ba_user_hits", {"run_id": run_id})
                con.unregister("ba_user_hits")
            finally:
                src.close()
            result.scans += 1
        counts = con.execute(
            "SELECT rule_id, count(*) FROM rule_hits WHERE list_contains($ids, rule_id) GROUP BY 1",
            {"ids": recorded or [""]},
        ).fetchall()
        result.hits_by_rule = {rid: 0 for rid in recorded} | {k: int(v) for k, v in counts}
        from billing_audit.pricing import build_spot_od, prices_key

        con.execute(
            "INSERT INTO tag_runs (run_id, started_at, rules, params, hits, lines_sig, state_key, prices_key, "
            "checkpoint_key) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            [run_id, datetime.now(UTC).replace(tzinfo=None), recorded,
             repr(sorted(params.items())), result.hits, sig, None if result.failed else key, prices_key(con), ckpt],
        )
        try:  # each spot line's on-demand equivalent, then the report's line groups from every rule's hits
            if plan is not None:
                plan.finish(con, run_id, local_ids)
            else:
                build_spot_od(con, run_id)
                build_groups(con, run_id)
            incremental.record_slices(con, run_id)
        except duckdb.InterruptException:
            raise BillingAuditError(f"grouping the tagged lines ran longer than {timeout:g} s and was stopped "
                                    "(BILLING_AUDIT_RULE_TIMEOUT)") from None
        con.execute("COMMIT")
    except BaseException:
        with contextlib.suppress(duckdb.Error):  # a failed COMMIT (a full disk) has ended the transaction already
            con.execute("ROLLBACK")
        raise
    finally:
        timer.cancel()
    return result
