"""The store's lines: the view ``line_items`` (every canonical column, in schema order, with its type) over the
table ``line_items_data``, which holds only the columns some ingested export gives values (README "The store")."""

from __future__ import annotations

from decimal import Decimal
from pathlib import Path

import billing_audit
from billing_audit import schema
from support import FIXTURES


def _columns(con: object, table: str) -> list[tuple[str, str]]:
    return con.execute(  # type: ignore[attr-defined, no-any-return]
        "SELECT column_name, data_type FROM duckdb_columns() WHERE database_name = current_database() "
        "AND table_name = ? ORDER BY column_index", [table]).fetchall()


def test_the_table_grows_with_the_columns_exports_provide_and_the_view_gives_them_all(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    want = [(c.name, c.type) for c in schema.COLUMNS]
    with billing_audit.open(db) as store:
        assert _columns(store.con, "line_items") == want  # an empty store: every column, no line
        assert store.ingest([FIXTURES / "aws"]).rows > 0
        aws = {n for n, _ in _columns(store.con, "line_items_data")}
        assert _columns(store.con, "line_items") == want
        assert "CommitmentDiscountName" not in aws and "SubAccountType" not in aws  # the CUR gives none
        totals = store.con.execute("SELECT x_SourceFile, count(*), sum(BilledCost) FROM line_items GROUP BY 1 "
                                   "ORDER BY 1").fetchall()
        assert store.ingest([FIXTURES / "azure"]).rows > 0
        both = {n for n, _ in _columns(store.con, "line_items_data")}
        assert aws < both and {"CommitmentDiscountName", "SubAccountType"} <= both  # Azure's cost details give them
        assert _columns(store.con, "line_items") == want
        # the CUR's lines are as they were, NULL in the columns Azure brought; Azure's carry values there
        assert store.con.execute("SELECT x_SourceFile, count(*), sum(BilledCost) FROM line_items WHERE x_Provider = "
                                 "'aws' GROUP BY 1 ORDER BY 1").fetchall() == totals
        by = dict(store.con.execute("SELECT x_Provider, count(SubAccountType) FROM line_items GROUP BY 1").fetchall())
        assert by["aws"] == 0 and by["azure"] > 0
        # a column no export gave: NULL for every line, of its canonical type
        missing = sorted(set(schema.COLUMN_NAMES) - both)
        assert "SkuPriceId" in missing
        assert store.con.execute(f"SELECT count({missing[0]}) FROM line_items").fetchone() == (0,)
    with billing_audit.open(db, read_only=True) as store:  # a reader sees the same view
        assert _columns(store.con, "line_items") == want
        assert store.con.execute("SELECT sum(BilledCost) > 0 FROM line_items").fetchone() == (True,)


def test_a_failed_ingest_adds_no_column(tmp_path: Path) -> None:
    """The table's new columns are added in the delivery's transaction: a delivery refused part-way leaves the table
    and the view as they were."""
    db = tmp_path / "s.duckdb"
    bad = tmp_path / "bad"
    bad.mkdir()
    src = next((FIXTURES / "azure").rglob("*.csv"))
    lines = src.read_text(encoding="utf-8-sig").splitlines()
    header = lines[0].split(",")
    cost = next(i for i, h in enumerate(header) if h.lower() in ("costinbillingcurrency", "cost"))
    row = lines[1].split(",")
    row[cost] = "not a number"
    (bad / src.name).write_text("\n".join([lines[0], lines[1], ",".join(row)]) + "\n", encoding="utf-8")
    with billing_audit.open(db) as store:
        assert store.ingest([FIXTURES / "aws"]).rows > 0
        before = _columns(store.con, "line_items_data")
        report = store.ingest([bad])
        assert report.errors and report.rows == 0
        assert "not a number" in str(report.errors[0]) or "row 2" in str(report.errors[0]), report.errors
        assert _columns(store.con, "line_items_data") == before
        assert store.con.execute("SELECT count(*) FROM line_items WHERE x_Provider = 'azure'").fetchone() == (0,)
        assert store.con.execute("SELECT sum(BilledCost) FROM line_items").fetchone()[0] > Decimal(0)


def test_a_relation_is_there_as_information_schema_lists_it(tmp_path: Path) -> None:
    """has_relation answers what information_schema.tables answers: the store's tables and views (line_items is
    a view), temp tables, and not DuckDB's own catalog views; a read-only store opens without the ingest's macros."""
    from billing_audit.store import has_relation

    db = tmp_path / "store.duckdb"
    with billing_audit.open(db) as store:
        store.ingest([FIXTURES / "aws" / "cur2"])
        store.con.execute("CREATE TEMP TABLE ba_scratch AS SELECT 1 AS x")
        names = ["line_items", "line_items_data", "slices", "ba_scratch", "interruption_events", "no_such_table",
                 "duckdb_tables", "tables", "columns"]
        listed = {n for n in names if store.con.execute(
            "SELECT count(*) FROM information_schema.tables WHERE table_name = ? AND table_schema = 'main'", [n]
        ).fetchone()[0]}
        assert {n for n in names if has_relation(store.con, n)} == listed
        assert {"line_items", "line_items_data", "slices", "ba_scratch"} <= listed and "no_such_table" not in listed
        assert store.con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'ba_tags'").fetchone()[0]
    with billing_audit.open(db, read_only=True) as reader:
        assert has_relation(reader.con, "line_items") and not has_relation(reader.con, "ba_scratch")
        assert not reader.con.execute("SELECT count(*) FROM duckdb_functions() WHERE function_name = 'ba_tags'"
                                      ).fetchone()[0]
