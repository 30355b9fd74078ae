"""Every built-in rule against its case file: rows that must match and near misses that must not."""

from __future__ import annotations

import pytest

from billing_audit.rulecases import REPO_CASES, read_case_file, run_case
from billing_audit.rules import load_rules

RULES = load_rules().rules
CASE_FILES = sorted(REPO_CASES.glob("*.yaml"))


def test_every_rule_has_positive_and_negative_cases() -> None:
    by_rule = {read_case_file(p).rule: read_case_file(p) for p in CASE_FILES}
    for rule in RULES:
        cf = by_rule.get(rule.id)
        assert cf is not None, f"{rule.id} has no case file in tests/rule_cases/"
        assert cf.match, f"{rule.id}: no row that must match"
        assert cf.no_match, f"{rule.id}: no near miss that must not match"


def test_case_files_name_real_rules() -> None:
    ids = {r.id for r in RULES}
    for p in CASE_FILES:
        assert read_case_file(p).rule in ids, p


@pytest.mark.parametrize("path", CASE_FILES, ids=[p.stem for p in CASE_FILES])
def test_rule_case(path) -> None:  # type: ignore[no-untyped-def]
    cf = read_case_file(path)
    rule = next(r for r in RULES if r.id == cf.rule)
    expected, hit = run_case(rule, cf)
    assert not expected - hit, f"{rule.id} missed rows that must match: {sorted(expected - hit)}"
    assert not hit - expected, f"{rule.id} matched near misses: {sorted(hit - expected)}"
