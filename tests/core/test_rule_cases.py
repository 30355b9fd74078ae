"""Every built-in rule against its case file: rows that must match and near misses that must not.

Case files sit beside the rules (BA010_x.sql -> BA010_x.cases.yaml) and are found with the
library's own lookup, the one `billing-audit rules test` uses.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from billing_audit.rulecases import builtin_case_files, case_file_for, check_rules, read_case_file, run_case
from billing_audit.rules import builtin_dir, load_rules

RULES = load_rules().rules
CASE_FILES = builtin_case_files()


def test_every_rule_has_positive_and_negative_cases() -> None:
    assert RULES and CASE_FILES
    for rule in RULES:
        path = case_file_for(rule)
        assert path is not None, f"{rule.id} has no case file beside {rule.path.name} in {builtin_dir()}"
        cf = read_case_file(path)
        assert cf.rule == rule.id, f"{path} is for {cf.rule}, not {rule.id}"
        assert cf.match, f"{rule.id}: no row that must match"
        assert cf.no_match, f"{rule.id}: no near miss that must not match"


def test_case_files_name_real_rules() -> None:
    by_path = {r.path.with_suffix(""): r for r in RULES}
    for p in CASE_FILES:
        rule = by_path.get(p.with_name(p.name.removesuffix(".cases.yaml")))
        assert rule is not None, f"{p}: no rule file beside it"
        assert read_case_file(p).rule == rule.id, p


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.name.split("_")[0] for p in CASE_FILES])
def test_rule_case(path: Path) -> None:
    cf = read_case_file(path)
    rule = next(r for r in RULES if r.id == cf.rule)
    expected, hit = run_case(rule, cf)
    assert not expected - hit, f"{rule.id} missed rows that must match: {sorted(expected - hit)}"
    assert not hit - expected, f"{rule.id} matched near misses: {sorted(hit - expected)}"


def test_check_rules_counts_the_builtin_cases() -> None:
    failures, lines = check_rules([])
    assert failures == 0, lines
    rows = sum(len(read_case_file(p).match) + len(read_case_file(p).no_match) for p in CASE_FILES)
    assert lines[-1] == f"{len(RULES)} rules checked, {len(CASE_FILES)} case files, {rows} case rows run"


def test_a_builtin_rule_without_a_case_file_fails(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import billing_audit.rules as rules_mod

    folder = tmp_path / "_rules"
    folder.mkdir()
    for rule in RULES:
        (folder / rule.path.name).write_text(rule.path.read_text())
        if rule.id != "BA010":
            (folder / (rule.path.stem + ".cases.yaml")).write_text(case_file_for(rule).read_text())  # type: ignore[union-attr]
    (folder / "BA999_gone.cases.yaml").write_text("rule: BA999\nmatch: []\nno_match: []\n")
    monkeypatch.setattr(rules_mod, "BUILTIN_DIR_CANDIDATES", (folder,))
    failures, lines = check_rules([])
    assert failures == 2, lines
    assert any(line.startswith("FAIL BA010 restart_fee.interrupted_spot: built-in rule without a case file") for line in lines), lines
    assert any(line.startswith("FAIL ") and "BA999_gone.cases.yaml: case file without a rule beside it" in line for line in lines), lines
    assert lines[-1].startswith(f"{len(RULES)} rules checked, {len(RULES) - 1} case files, ")
