"""User rules run bounded: memory (the child's address space), time (from before binding), header size.

Issue #15 item 3.  Each user rule runs in its own child process (billing_audit/rulebox.py) with RLIMIT_AS at
BILLING_AUDIT_RULE_MEMORY (default 1536 MB); the tests measure the child's peak resident memory (its
ru_maxrss, from wait4) and the wall time, and check the error names the rule.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.rules import RuleError, load_rules, parse_rule_file
from support import FIXTURES

BOUND = int(1.5 * (1 << 30))  # what the tests allow a bounded run's peak RSS
HEADER = """/*
id: TM600
name: custom.bomb
title: a memory bomb
category: custom
severity: low
providers: [aws]
{params}*/
"""

BOMBS = [
    "select x_LineItemId, 'x' as reason from line_items where length(repeat(x_LineItemId, 100000000)) > 0",
    "select x_LineItemId, repeat('x', 2000000000) as reason from line_items",
    # grows step by step (no single huge allocation): every line's id repeated a million times, glued together
    "select x_LineItemId, (select string_agg(repeat(x_LineItemId, 1000000), '') from line_items) as reason "
    "from line_items",
]


@pytest.fixture
def store(tmp_path: Path) -> Path:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as s:
        assert not s.ingest([FIXTURES / "scenarios"]).errors
        s.tag()
    return db


def _rule(folder: Path, sql: str, params: str = "") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "TM600_bomb.sql"
    path.write_text(HEADER.format(params=params) + sql + "\n")
    return path


@pytest.mark.parametrize("sql", BOMBS, ids=["repeat-in-where", "repeat-as-reason", "string_agg-growth"])
def test_memory_bombs_are_stopped_under_the_bound(store: Path, tmp_path: Path, sql: str,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BILLING_AUDIT_RULE_TIMEOUT", "10")
    rule = parse_rule_file(_rule(tmp_path / "r", sql))
    with billing_audit.open(store) as s:
        before = s.con.execute("SELECT rule_id, count(*) FROM rule_hits GROUP BY 1 ORDER BY 1").fetchall()
        start = time.monotonic()
        result = s.tag([*load_rules().rules, rule])
        took = time.monotonic() - start
        after = s.con.execute("SELECT rule_id, count(*) FROM rule_hits GROUP BY 1 ORDER BY 1").fetchall()
    run = result.bounded["TM600"]
    [error] = result.failed
    assert error.file == str(rule.path) and "TM600_bomb.sql" in str(error)
    assert "memory" in str(error) or "ran longer than" in str(error), str(error)
    assert run.peak_rss < BOUND, f"peak RSS {run.peak_rss >> 20} MiB"
    assert took < 10 + 20, f"took {took:.1f} s"
    assert after == before  # the built-in rules' hits are stored, the bomb's are not
    print(f"\n{sql[:60]}: peak RSS {run.peak_rss >> 20} MiB, {run.seconds:.1f} s; {error.reason[:80]}")


def test_a_slow_rule_is_stopped_at_its_timeout(store: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BILLING_AUDIT_RULE_TIMEOUT", "3")
    rule = parse_rule_file(_rule(tmp_path / "r", "select a.x_LineItemId, 'x' as reason from line_items a, line_items b, line_items c, "
                                 "line_items d, line_items e, line_items f, line_items g where hash(a.x_LineItemId, "
                                 "b.x_LineItemId, c.x_LineItemId, d.x_LineItemId, e.x_LineItemId, f.x_LineItemId, "
                                 "g.x_LineItemId) = 0"))
    with billing_audit.open(store) as s:
        start = time.monotonic()
        result = s.tag([rule])
        took = time.monotonic() - start
    [error] = result.failed
    assert "ran longer than 3 s" in str(error) and "TM600_bomb.sql" in str(error)
    assert result.bounded["TM600"].seconds < 3 + 2
    assert took < 3 + 15
    print(f"\nslow rule stopped after {result.bounded['TM600'].seconds:.1f} s "
          f"(peak RSS {result.bounded['TM600'].peak_rss >> 20} MiB)")


def test_an_ordinary_user_rule_runs_bounded_and_stores_its_hits(store: Path, tmp_path: Path) -> None:
    rule = parse_rule_file(_rule(tmp_path / "r", "select x_LineItemId, 'fee ' || BilledCost as reason "
                                 "from line_items where BilledCost > 1"))
    with billing_audit.open(store) as s:
        result = s.tag([rule])
        want = s.con.execute("SELECT count(*) FROM line_items WHERE BilledCost > 1").fetchone()
        got = s.con.execute("SELECT count(*) FROM rule_hits WHERE rule_id = 'TM600'").fetchone()
    assert not result.failed and got == want and want[0] > 0
    assert result.bounded["TM600"].peak_rss < BOUND


ALIAS_BOMB = """params:
  p:
    description: x
    default: &a [x, x, x, x, x, x, x, x, x]
  q: {description: y, default: &b [*a, *a, *a, *a, *a, *a, *a, *a, *a]}
  r: {description: z, default: [*b, *b, *b, *b, *b, *b, *b, *b, *b]}
"""


def test_yaml_aliases_in_a_header_are_refused_at_load(tmp_path: Path) -> None:
    path = _rule(tmp_path, "select x_LineItemId, 'x' as reason from line_items", ALIAS_BOMB)
    start = time.monotonic()
    with pytest.raises(RuleError) as e:
        parse_rule_file(path)
    assert time.monotonic() - start < 1
    assert "anchors" in e.value.reason or "aliases" in e.value.reason
    assert e.value.line == 11  # the line of the first anchor
    r = CliRunner().invoke(main, ["rules", "show", "TM600", "--rules", str(tmp_path)])
    assert r.exit_code == 2 and "MemoryError" not in r.output and "not allowed in a rule header" in r.output


def test_oversized_parameter_values_are_refused_at_load(tmp_path: Path) -> None:
    big = "params:\n  p: {description: x, default: [" + ", ".join(["abcdefgh"] * 3000) + "]}\n"
    path = _rule(tmp_path, "select x_LineItemId, 'x' as reason from line_items where x_UsageType in $p", big)
    with pytest.raises(RuleError, match="parameter 'p': its default is too large") as e:
        parse_rule_file(path)
    assert e.value.line == 9
