"""billing-audit search: word families, exactness, automation exit codes, saved rules, hostile queries."""

from __future__ import annotations

import json
from decimal import Decimal
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.search import expand, search
from support import FIXTURES

FEE_WORDS = ("restart fee", "recovery charge", "preemption overhead")


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("search") / "s.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([FIXTURES]).errors
        store.tag()
    return path


def _run(db: Path, *args: str) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["search", *args, "--db", str(db)])
    return r.exit_code, r.output


def _ids(db: Path, *args: str) -> set[str]:
    code, out = _run(db, *args, "--lines", "--format", "json", "--limit", "100000")
    assert code == 0, out
    return {line["x_LineItemId"] for line in json.loads(out)["lines"]}


def test_spot_restart_finds_every_providers_fee_and_no_spot_usage(db: Path) -> None:
    found = _ids(db, "spot restart")
    with billing_audit.open(db) as store:
        rows = store.con.execute(
            "SELECT x_LineItemId, x_Provider, lower(concat_ws(' ', ChargeDescription, x_UsageType)) FROM line_items"
        ).fetchall()
        spot_usage = {r[0] for r in store.con.execute(
            "SELECT x_LineItemId FROM line_categories WHERE category = 'spot_compute'").fetchall()}
    fees = {r[0] for r in rows if any(w in r[2] for w in FEE_WORDS)}
    assert found == fees
    assert {r[1] for r in rows if r[0] in found} == {"aws", "azure", "gcp"}
    assert not found & spot_usage


def test_exact_narrows(db: Path) -> None:
    families = _ids(db, "spot restart")
    exact = _ids(db, "spot restart", "--exact")
    assert exact < families
    with billing_audit.open(db) as store:
        dropped = store.con.execute(
            "SELECT DISTINCT x_UsageType FROM line_items WHERE list_contains(?, x_LineItemId)", [sorted(families - exact)]
        ).fetchall()
    assert all("preemption overhead" in r[0] for r in dropped)


def test_table_says_which_words_matched_what(db: Path) -> None:
    code, out = _run(db, "spot restart", "--provider", "gcp")
    assert code == 0
    assert "restart~preemption overhead" in out.replace("\n", " ").replace("│", " ").replace("  ", " ") or \
        "restart~preemption" in out
    assert "\x1b[" not in out  # no colour on a pipe


def test_json_shape_and_totals(db: Path) -> None:
    code, out = _run(db, "spot restart", "--format", "json")
    assert code == 0
    data = json.loads(out)
    assert list(data) == ["schema_version", "kind", "generated_at", "filters", "query", "expanded_terms", "limit",
                          "matched", "left_out", "groups", "totals"]
    assert data["expanded_terms"]["restart"][:3] == ["restart", "recovery", "recover"]
    for g in data["groups"]:
        assert list(g) == ["provider", "description", "usage_type", "currency", "lines", "quantity", "total_cost",
                           "first_date", "last_date", "accounts"]
        assert isinstance(g["lines"], int) and isinstance(g["total_cost"], str) and isinstance(g["accounts"], list)
    costs = [Decimal(g["total_cost"]) for g in data["groups"]]
    assert costs == sorted(costs, reverse=True)
    for t in data["totals"]:  # exact: the decimal strings add up to the cent
        assert Decimal(t["total_cost"]) == sum(Decimal(g["total_cost"]) for g in data["groups"]
                                               if g["currency"] == t["currency"])


def test_fail_above_exit_codes(db: Path) -> None:
    assert _run(db, "spot restart", "--fail-above", "0.5")[0] == 1
    assert _run(db, "spot restart", "--fail-above", "1000")[0] == 0
    assert _run(db, "no-such-word-anywhere", "--fail-above", "0")[0] == 0
    code, out = _run(db, "spot restart", "--fail-above", "ten")
    assert code == 2 and "--fail-above" in out


def test_save_rule_round_trip(db: Path, tmp_path: Path) -> None:
    rule = tmp_path / "team" / "SR100_spot_restart.sql"
    code, out = _run(db, "spot restart", "--provider", "azure", "--save-rule", str(rule))
    assert code == 0, out
    assert "category: custom" in rule.read_text()
    r = CliRunner().invoke(main, ["rules", "test", "--rules", str(rule.parent)])
    assert r.exit_code == 0, r.output
    assert "ok   SR100" in r.output
    r = CliRunner().invoke(main, ["tag", "--db", str(db), "--rules", str(rule.parent), "--select", "SR100"])
    assert r.exit_code == 0, r.output
    with billing_audit.open(db) as store:
        tagged = {x[0] for x in store.con.execute("SELECT x_LineItemId FROM rule_hits WHERE rule_id = 'SR100'").fetchall()}
    assert tagged == _ids(db, "spot restart", "--provider", "azure")
    assert tagged


def test_saved_rule_from_a_hostile_query_is_still_safe(db: Path, tmp_path: Path) -> None:
    rule = tmp_path / "r" / "SR200_x.sql"
    code, out = _run(db, "spot */ drop table line_items; -- ' \"", "--save-rule", str(rule))
    assert code == 0, out
    r = CliRunner().invoke(main, ["rules", "test", "--rules", str(rule.parent)])
    assert r.exit_code == 0, r.output
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone()[0] > 0


@pytest.mark.parametrize(
    "query",
    ["'; DROP TABLE line_items; --", "100%", "%_%", ".*[(", "\\", "a' OR '1'='1", "x" * 10_000, "$t0", "lambda a: 1"],
)
def test_hostile_queries_give_a_correct_empty_result(db: Path, query: str) -> None:
    code, out = _run(db, query, "--format", "json")
    assert code == 0, out
    assert json.loads(out)["groups"] == []
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT count(*) FROM line_items").fetchone()[0] > 0


@pytest.mark.parametrize("char", ["%", "_"])
def test_like_wildcards_are_literal(db: Path, char: str) -> None:
    code, out = _run(db, char, "--format", "json", "--limit", "1000")
    assert code == 0
    groups = json.loads(out)["groups"]
    assert groups  # e.g. "VAT (23%)", "Standard_D4s_v5"
    with billing_audit.open(db) as store:
        n = store.con.execute("SELECT count(*) FROM line_items").fetchone()[0]
    assert sum(g["lines"] for g in groups) < n


@pytest.mark.parametrize(("query", "words"), [("", "at least one word"), ("   ", "at least one word"),
                                              ("y" * 10_001, "at most 10,000"),
                                              (" ".join(f"w{i}" for i in range(21)), "at most 20 words")])
def test_bad_queries_have_a_clear_message(db: Path, query: str, words: str) -> None:
    code, out = _run(db, query)
    assert code == 2
    assert words in out


def test_accents_case_and_filters(db: Path) -> None:
    assert _ids(db, "PRÉEMPTION overhead") == _ids(db, "preemption overhead")
    gcp = _ids(db, "spot restart", "--provider", "gcp")
    assert gcp and gcp < _ids(db, "spot restart")
    assert _ids(db, "spot restart", "--period", "2026-09") < _ids(db, "spot restart")
    assert not _ids(db, "spot restart", "--since", "2030-01-01")  # after every fixture (the newest: February 2027)


def test_lines_name_their_source(db: Path) -> None:
    code, out = _run(db, "spot restart", "--lines", "--format", "json", "--provider", "aws")
    data = json.loads(out)
    assert data["lines"]
    for line in data["lines"]:
        assert Path(line["source_file"].split("!")[0]).exists() and line["source_row"] >= 1


def test_family_expansion() -> None:
    assert dict(expand("evicted"))["evicted"][:2] == ["evicted", "interrupt"]
    assert dict(expand("low priority")) == {"low": ["low"], "priority": ["priority"]}
    assert expand("spot", exact=True) == [("spot", ["spot"])]


def test_library_api(db: Path) -> None:
    with billing_audit.open(db) as store:
        res = search(store, "interrupt", provider="aws")
    assert res.groups.height > 0
    assert set(res.groups["provider"].to_list()) == {"aws"}


@pytest.mark.parametrize("query,kw", [
    ("spot restart", {}), ("egress", {"provider": "aws"}), ("gpu", {"period": "2026-10"}),
    ("storage", {"since": __import__("datetime").date(2026, 10, 15)}), ("fee", {"exact": True, "limit": 3}),
    ("nothing-matches-this", {}),
])
def test_the_search_index_answers_exactly_as_the_lines(db: Path, tmp_path: Path, query: str, kw: dict) -> None:
    import shutil

    from billing_audit import rollup
    from billing_audit.search import search

    copy = tmp_path / "c.duckdb"
    shutil.copy(db, copy)
    with billing_audit.open(copy) as store:
        assert store._has_table("search_index") and rollup.current_groups(store.con)
        indexed = search(store, query, **kw).to_dict()
        rollup.drop_groups(store.con)  # what ingest does when lines change: the index goes too
        assert not store._has_table("search_index")
        scanned = search(store, query, **kw).to_dict()
    # the envelope's generated_at is the clock's; everything else must be the same, values and types (1 vs 1.0)
    indexed.pop("generated_at"), scanned.pop("generated_at")
    assert json.dumps(indexed, default=str) == json.dumps(scanned, default=str)
    if query == "spot restart":
        assert indexed["groups"]


def test_an_index_of_the_previous_layout_is_not_read_and_the_next_tag_run_rebuilds_it(db: Path, tmp_path: Path) -> None:
    """Line groups of version 3 came with a search index whose rows carried the description and usage type
    (search_texts did not): such a store answers from its lines until the next tag run, which writes the index
    of today's layout; the answers are the same throughout."""
    import shutil

    from billing_audit import rollup
    from billing_audit.search import search

    copy = tmp_path / "old.duckdb"
    shutil.copy(db, copy)
    with billing_audit.open(copy) as store:
        now = search(store, "spot restart").to_dict()
        con = store.con
        # the previous layout, as version 3 wrote it
        con.execute("CREATE OR REPLACE TABLE search_index AS SELECT x.h, x.provider, t.description, t.usage_type, "
                    "x.* EXCLUDE (h, provider) FROM search_index x JOIN search_texts t USING (h)")
        con.execute("CREATE OR REPLACE TABLE search_texts AS SELECT h, norm FROM search_texts")
        con.execute("UPDATE line_groups_meta SET version = 3")
    with billing_audit.open(copy) as store:
        assert rollup.current_groups(store.con) is None
        old = search(store, "spot restart").to_dict()
        result = store.tag()
        assert not result.unchanged and result.plan is None  # groups of an older version are rebuilt whole
        assert rollup.current_groups(store.con) is not None
        cols = [r[0] for r in store.con.execute("SELECT column_name FROM duckdb_columns() WHERE table_name = "
                                                "'search_texts' ORDER BY column_index").fetchall()]
        assert cols == ["h", "description", "usage_type", "norm"]
        again = search(store, "spot restart").to_dict()
    for d in (now, old, again):
        d.pop("generated_at")
    assert now["groups"] and json.dumps(now, default=str) == json.dumps(old, default=str) == json.dumps(again, default=str)
