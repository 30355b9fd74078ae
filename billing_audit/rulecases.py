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
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from billing_audit import schema
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule, RuleError, load_rules

REPO_CASES = Path(__file__).resolve().parent.parent / "tests" / "rule_cases"


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


def case_files_for(rule: Rule) -> list[Path]:
    beside = rule.path.with_name(rule.path.stem + ".cases.yaml")
    found = [beside] if beside.exists() else []
    repo = REPO_CASES / f"{rule.id}.yaml"
    if rule.builtin and repo.exists():
        found.append(repo)
    return found


def run_case(rule: Rule, case: CaseFile) -> tuple[set[str], set[str]]:
    """(ids expected to match, ids that matched) on a scratch store."""
    from billing_audit.store import Store

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
                    f"INSERT INTO line_items ({', '.join(chr(34) + c + chr(34) for c in cols)}) VALUES ({placeholders})",
                    values,
                )
            store.tag([rule], case.params)
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
    """Validate every rule (and run its case files); returns (failures, report lines)."""
    from billing_audit.store import Store

    lines: list[str] = []
    failures = 0
    try:
        ruleset = load_rules(dirs)
    except RuleError as e:
        return 1, [f"FAIL {e}"]
    with tempfile.TemporaryDirectory(prefix="ba-rules-") as tmp:
        store = Store(Path(tmp) / "empty.duckdb")
        try:
            for rule in ruleset.rules:
                try:
                    store.tag([rule])  # binds against the real schema and runs on an empty store
                except BillingAuditError as e:
                    failures += 1
                    lines.append(f"FAIL {rule.id} {e}")
                    continue
                cases = case_files_for(rule)
                if not cases:
                    lines.append(f"ok   {rule.id} {rule.name} (valid; no case file)")
                    continue
                for cf_path in cases:
                    cf = read_case_file(cf_path)
                    expected, hit = run_case(rule, cf)
                    if expected == hit:
                        lines.append(f"ok   {rule.id} {rule.name}: {len(cf.match)} match, {len(cf.no_match)} near misses")
                    else:
                        failures += 1
                        missed = sorted(expected - hit)
                        wrong = sorted(hit - expected)
                        lines.append(f"FAIL {rule.id} {cf_path}: missed {missed}, wrongly matched {wrong}")
        finally:
            store.close()
    return failures, lines
