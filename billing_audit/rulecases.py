"""Rule cases as data: rows that must match a rule and near misses that must not.

A case file is YAML::

    rule: BA010
    params: {min_cost: 0}          # optional
    match:
      - {x_Provider: azure, ChargeCategory: Usage, x_UsageType: "Virtual Machines|Other Compute Charges|Spot Restart Fee"}
    no_match:
      - {x_Provider: aws, ChargeCategory: Usage, x_UsageType: USE1-SpotUsage:p4d.24xlarge}

Row keys are canonical line_items columns; ``Tags`` is a mapping.  Each row
becomes one line in a scratch store, the rule runs there, and exactly the
``match`` rows must be hit.

A rule's case file sits beside it, named after the rule file
(``BA010_restart_fee_interrupted_spot.sql`` -> ``BA010_restart_fee_interrupted_spot.cases.yaml``),
for the built-in rules (``rules/`` in a checkout, ``billing_audit/_rules`` in a
wheel) and user rules alike.  Every built-in rule must have one.
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import duckdb
import yaml

from billing_audit import schema
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule, RuleError, builtin_dir, load_rules

CASES_SUFFIX = ".cases.yaml"


@dataclass
class CaseFile:
    path: Path
    rule: str
    match: list[dict[str, Any]]
    no_match: list[dict[str, Any]]
    params: dict[str, Any] = field(default_factory=dict)


def read_case_file(path: Path) -> CaseFile:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except (OSError, yaml.YAMLError) as e:
        raise BillingAuditError(f"{path}: cannot read case file: {e}") from None
    if not isinstance(data, dict) or "rule" not in data:
        raise BillingAuditError(f"{path}: a case file is a mapping with rule, match and no_match")
    unknown = set(data) - {"rule", "params", "match", "no_match"}
    if unknown:
        raise BillingAuditError(f"{path}: unknown key {sorted(unknown)[0]!r} (allowed: rule, params, match, no_match)")
    for kind in ("match", "no_match"):
        for i, row in enumerate(data.get(kind) or []):
            bad = set(row) - set(schema.COLUMN_NAMES)
            if bad:
                raise BillingAuditError(f"{path}: {kind}[{i}] has unknown column {sorted(bad)[0]!r}")
    return CaseFile(path, str(data["rule"]), list(data.get("match") or []), list(data.get("no_match") or []),
                    dict(data.get("params") or {}))


def case_path(rule_file: Path) -> Path:
    """Where the case file of a rule file goes: BA100_x.sql -> BA100_x.cases.yaml beside it."""
    return rule_file.with_name(rule_file.stem + CASES_SUFFIX)


def case_file_for(rule: Rule) -> Path | None:
    """The case file beside the rule, if there is one (built-in and user rules alike)."""
    path = case_path(rule.path)
    return path if path.is_file() else None


def builtin_case_files() -> list[Path]:
    """Every case file in the built-in rules folder (wherever the built-in rules load from)."""
    return sorted(builtin_dir().glob("*" + CASES_SUFFIX))


def orphan_case_files(dirs: list[Path]) -> list[Path]:
    """Case files in the given rule folders with no rule file beside them (e.g. left behind by a rename)."""
    found: list[Path] = []
    for d in dirs:
        if d.is_dir():
            found += [p for p in sorted(d.rglob("*" + CASES_SUFFIX))
                      if not p.with_name(p.name[: -len(CASES_SUFFIX)] + ".sql").is_file()]
    return found


def run_case(rule: Rule, case: CaseFile) -> tuple[set[str], set[str]]:
    """(ids expected to match, ids that matched) on a scratch store."""
    from billing_audit.store import Store, lines_table

    rows: list[dict[str, Any]] = []
    for kind in ("match", "no_match"):
        for i, row in enumerate(getattr(case, kind)):
            r = {"x_Provider": "aws", "ChargeCategory": "Usage", "BillingCurrency": "USD", **row}
            r["x_LineItemId"] = f"{kind}-{i + 1}"
            rows.append(r)
    with tempfile.TemporaryDirectory(prefix="ba-case-") as tmp:
        store = Store(Path(tmp) / "case.duckdb")
        try:
            for r in rows:
                cols = list(r)
                values = [schema_value(c, r[c]) for c in cols]
                placeholders = ", ".join(
                    "?::MAP(VARCHAR, VARCHAR)" if c == "Tags" else f"CAST(? AS {schema.BY_NAME[c].type})" for c in cols
                )
                store.con.execute(
                    f"INSERT INTO {lines_table(store.con, cols)} ({', '.join(chr(34) + c + chr(34) for c in cols)}) "
                    f"VALUES ({placeholders})", values)
            result = store.tag([rule], case.params)
            if result.failed:
                raise result.failed[0]
            hit = {row[0] for row in store.con.execute("SELECT x_LineItemId FROM rule_hits").fetchall()}
        finally:
            store.close()
    expected = {f"match-{i + 1}" for i in range(len(case.match))}
    return expected, hit


def schema_value(column: str, value: Any) -> Any:
    if column == "Tags":
        return {str(k).lower(): str(v) for k, v in (value or {}).items()}
    return value


def check_rules(dirs: list[Path]) -> tuple[int, list[str]]:
    """Validate every rule (and run its case file); returns (failures, report lines).

    The last line says how much ran: ``7 rules checked, 7 case files, 42 case rows run``.
    A built-in rule without a case file fails; a user rule without one is only validated.
    """
    from billing_audit.store import Store

    lines: list[str] = []
    failures = 0
    case_files = case_rows = 0
    try:
        ruleset = load_rules(dirs)
    except RuleError as e:
        return 1, [f"FAIL {e}"]
    with tempfile.TemporaryDirectory(prefix="ba-rules-") as tmp:
        store = Store(Path(tmp) / "empty.duckdb")
        try:
            for rule in ruleset.rules:
                try:
                    tagged = store.tag([rule])  # binds against the real schema and runs on an empty store
                    if tagged.failed:
                        raise tagged.failed[0]
                except BillingAuditError as e:
                    failures += 1
                    lines.append(f"FAIL {rule.id} {e}")
                    continue
                cf_path = case_file_for(rule)
                if cf_path is None:
                    if rule.builtin:
                        failures += 1
                        lines.append(f"FAIL {rule.id} {rule.name}: built-in rule without a case file (expected {case_path(rule.path)})")
                    else:
                        lines.append(f"ok   {rule.id} {rule.name} (valid; no case file)")
                    continue
                try:
                    cf = read_case_file(cf_path)
                    if cf.rule != rule.id:
                        raise BillingAuditError(f"{cf_path}: case file is for rule {cf.rule!r}, but sits beside {rule.id}")
                    expected, hit = run_case(rule, cf)
                except (BillingAuditError, duckdb.Error) as e:
                    failures += 1
                    lines.append(f"FAIL {rule.id} {e}")
                    continue
                case_files += 1
                case_rows += len(cf.match) + len(cf.no_match)
                if expected == hit:
                    lines.append(f"ok   {rule.id} {rule.name}: {len(cf.match)} match, {len(cf.no_match)} near misses")
                else:
                    failures += 1
                    missed = sorted(expected - hit)
                    wrong = sorted(hit - expected)
                    lines.append(f"FAIL {rule.id} {cf_path}: missed {missed}, wrongly matched {wrong}")
        finally:
            store.close()
    for orphan in orphan_case_files([builtin_dir(), *dirs]):
        failures += 1
        lines.append(f"FAIL {orphan}: case file without a rule beside it (expected {orphan.name[: -len(CASES_SUFFIX)]}.sql)")
    lines.append(f"{len(ruleset.rules)} rules checked, {case_files} case files, {case_rows} case rows run")
    return failures, lines
