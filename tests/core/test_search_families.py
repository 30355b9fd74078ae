"""Search word families for egress, re-reads and storage (and restart / eviction / preemption): the words the
three providers bill with find the lines the rules put in those categories."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.search import expand
from support import FIXTURES


@pytest.fixture(scope="module")
def db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("families") / "s.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([FIXTURES]).errors
        store.tag()
    return path


def _found(db: Path, *args: str) -> dict[str, str]:
    """line id -> provider of every line the search lists."""
    r = CliRunner().invoke(main, ["search", *args, "--db", str(db), "--lines", "--format", "json", "--limit", "100000"])
    assert r.exit_code == 0, r.output
    return {line["x_LineItemId"]: line["provider"] for line in json.loads(r.output)["lines"]}


def _category(db: Path, category: str) -> dict[str, str]:
    with billing_audit.open(db, read_only=True) as store:
        rows = store.con.execute("SELECT l.x_LineItemId, l.x_Provider FROM line_items l JOIN line_categories c "
                                 "USING (x_LineItemId) WHERE c.category = ?", [category]).fetchall()
    return dict(rows)


def _texts(db: Path, ids: set[str]) -> list[str]:
    with billing_audit.open(db, read_only=True) as store:
        rows = store.con.execute("SELECT lower(concat_ws(' ', ChargeDescription, x_UsageType, SkuMeter, ServiceName)) "
                                 "FROM line_items WHERE list_contains(?, x_LineItemId)", [sorted(ids)]).fetchall()
    return [r[0] for r in rows]


@pytest.mark.parametrize(("query", "category"), [("egress", "checkpoint_egress"), ("re-read", "storage_reread"),
                                                 ("reread", "storage_reread"), ("restart", "restart_fee")])
def test_family_finds_every_line_of_its_category_on_all_three_providers(db: Path, query: str, category: str) -> None:
    wanted = _category(db, category)
    assert set(wanted.values()) == {"aws", "azure", "gcp"}, "the fixtures bill this on every provider"
    found = _found(db, query)
    assert set(wanted) <= set(found), sorted(set(wanted) - set(found))
    # nothing but the plain word without families: the bills never say "egress" or "re-read"
    if query in ("egress", "re-read", "reread"):
        assert _found(db, query, "--exact") == {}


def test_egress_finds_transfer_lines_only(db: Path) -> None:
    found = _found(db, "egress")
    words = ("data transfer", "bandwidth", "out-bytes", "inter region", "inter-region")
    assert all(any(w in t for w in words) for t in _texts(db, set(found)))
    # the checkpoint-egress lines and every other transfer line; no storage or compute line
    assert set(_found(db, "transfer")) <= set(found)
    assert set(found.values()) == {"aws", "azure", "gcp"}


def test_storage_family_reaches_blob_and_bucket_wording(db: Path) -> None:
    found = _found(db, "storage")
    plain = _found(db, "storage", "--exact")
    assert set(plain) <= set(found)
    assert set(found.values()) == {"aws", "azure", "gcp"}
    assert set(_category(db, "storage_reread")) <= set(found)  # every re-read is a storage line


def test_eviction_and_preemption_are_one_family(db: Path) -> None:
    eviction, preemption = _found(db, "eviction"), _found(db, "preemption")
    assert eviction == preemption
    signals = _category(db, "interruption_signal")  # AWS "Spot Instance interrupted: capacity reclaimed"
    assert signals and set(signals) <= set(eviction)
    assert {"aws", "gcp"} <= set(eviction.values())


def test_family_is_applied_to_the_query_not_the_index() -> None:
    [(word, alts)] = expand("egress")
    assert word == "egress" and "data transfer out" in alts and "bandwidth" in alts
    assert expand("egress", exact=True) == [("egress", ["egress"])]
    [(_, rr)] = expand("re-read")
    assert "class b operations" in rr and "read operations" in rr
    # a phrase member is only reached by typing it whole; "data" alone stays itself
    assert expand("data") == [("data", ["data"])]
