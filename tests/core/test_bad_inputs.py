"""The bad-input list: each gives a clear message naming file/row/column, exit 2 and an unchanged store,
or - where the input is valid (credits, three date formats, time zones, embedded newlines) - ingests right."""

from __future__ import annotations

import csv
import io
import math
from decimal import Decimal
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from support import FIXTURES, dump_line_items

PARQUET = FIXTURES / "aws/cur-legacy-parquet/cur/gpu-cur/gpu-cur/year=2026/month=10/gpu-cur-00001.snappy.parquet"
COLS = ["lineItem/UsageStartDate", "lineItem/UsageEndDate", "lineItem/LineItemType", "lineItem/UnblendedCost",
        "bill/PayerAccountId", "bill/BillingPeriodStartDate", "lineItem/UsageType", "lineItem/LineItemDescription",
        "resourceTags/user:team"]


def row(cost: str = "1.5", start: str = "2026-10-01T00:00:00Z", desc: str = "spot hour", team: str = "vision",
        **kw: str) -> list[str]:
    values = {"lineItem/UsageStartDate": start, "lineItem/UsageEndDate": "2026-10-01T01:00:00Z",
              "lineItem/LineItemType": "Usage", "lineItem/UnblendedCost": cost, "bill/PayerAccountId": "012345678901",
              "bill/BillingPeriodStartDate": "2026-10-01T00:00:00Z", "lineItem/UsageType": "USE1-SpotUsage:p4d.24xlarge",
              "lineItem/LineItemDescription": desc, "resourceTags/user:team": team, **kw}
    return [values[c] for c in COLS]


def csv_text(rows: list[list[str]], header: list[str] | None = None) -> str:
    buf = io.StringIO()
    w = csv.writer(buf, lineterminator="\n")
    w.writerow(header or COLS)
    w.writerows(rows)
    return buf.getvalue()


@pytest.fixture
def seeded(db: Path) -> Path:
    with billing_audit.open(db) as store:
        store.ingest([PARQUET.parent])
    return db


def ingest(db: Path, path: Path) -> tuple[int, str, str]:
    """exit code, output, and the store's content afterwards"""
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", str(db)])
    with billing_audit.open(db) as store:
        return r.exit_code, r.output, dump_line_items(store.con)


def state(db: Path) -> str:
    with billing_audit.open(db) as store:
        return dump_line_items(store.con)


def put(tmp_path: Path, name: str, data: bytes | str) -> Path:
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir()
    p = folder / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


def assert_refused(seeded: Path, path: Path, *words: str, row: int | None = None, column: str | None = None) -> str:
    before = state(seeded)
    code, out, after = ingest(seeded, path)
    assert code == 2, out
    assert str(path) in out
    for w in words:
        assert w in out, out
    if row is not None:
        assert f"row {row}" in out, out
    if column is not None:
        assert f"column '{column}'" in out, out
    assert after == before
    return out


def test_corrupt_parquet(seeded: Path, tmp_path: Path) -> None:
    data = bytearray(PARQUET.read_bytes())
    data[200:400] = b"\x00" * 200
    assert_refused(seeded, put(tmp_path, "corrupt.parquet", bytes(data)))
    assert_refused(seeded, put(tmp_path, "notparquet.parquet", b"PAR1 this is not parquet PAR1"), "parquet")


def test_unbalanced_quotes_and_long_row(seeded: Path, tmp_path: Path) -> None:
    text = csv_text([row(), row(), row()])
    lines = text.splitlines()
    assert_refused(seeded, put(tmp_path, "quote.csv", "\n".join([*lines[:2], lines[2] + ',"open', lines[3]]) + "\n"),
                   "unterminated quote", row=2)
    assert_refused(seeded, put(tmp_path, "long.csv", "\n".join([*lines[:3], lines[3] + ",extra"]) + "\n"),
                   "Expected Number of Columns", row=3)


def test_embedded_newlines_are_valid(db: Path, tmp_path: Path) -> None:
    path = put(tmp_path, "nl.csv", csv_text([row(desc="first line\nsecond line"), row(cost="2", desc="after")]))
    code, out, _ = ingest(db, path)
    assert code == 0, out
    with billing_audit.open(db) as store:
        rows = store.con.execute("SELECT x_SourceRow, ChargeDescription FROM line_items ORDER BY 1").fetchall()
    assert rows == [(1, "first line\nsecond line"), (2, "after")]


def test_latin1_and_utf16_are_refused(seeded: Path, tmp_path: Path) -> None:
    text = csv_text([row(desc="Zürich spot hour")])
    assert_refused(seeded, put(tmp_path, "latin1.csv", text.encode("latin-1")), "UTF-8")
    assert_refused(seeded, put(tmp_path, "utf16.csv", text.encode("utf-16")), "UTF-16")


def test_bom_in_the_middle_of_concatenated_files(seeded: Path, tmp_path: Path) -> None:
    text = "\ufeff" + csv_text([row()]) + "\ufeff" + csv_text([row()])
    assert_refused(seeded, put(tmp_path, "cat.csv", text), "as a date", row=2)


def test_bom_inside_a_value_is_kept(db: Path, tmp_path: Path) -> None:
    code, out, _ = ingest(db, put(tmp_path, "bomval.csv", "\ufeff" + csv_text([row(desc="a\ufeffb")])))
    assert code == 0, out
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT ChargeDescription FROM line_items").fetchone() == ("a\ufeffb",)


def test_empty_and_header_only(seeded: Path, tmp_path: Path) -> None:
    assert_refused(seeded, put(tmp_path, "empty.csv", b""), "empty")
    assert_refused(seeded, put(tmp_path, "header.csv", csv_text([])), "no data rows")
    assert_refused(seeded, put(tmp_path, "empty.parquet", b""), "empty")


def test_a_50_mb_field(db: Path, tmp_path: Path) -> None:
    big = "x" * (50 * 1024 * 1024)
    code, out, _ = ingest(db, put(tmp_path, "big.csv", csv_text([row(desc=big), row(cost="2")])))
    assert code == 0, out
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT length(ChargeDescription) FROM line_items ORDER BY x_SourceRow").fetchall() \
            == [(len(big),), (9,)]


@pytest.mark.parametrize("cost", ["1,234.56", "N/A", "Infinity", "-inf", "12 USD", "1.2.3"])
def test_unreadable_costs(seeded: Path, tmp_path: Path, cost: str) -> None:
    path = put(tmp_path, "cost.csv", csv_text([row(), row(cost=cost)]))
    assert_refused(seeded, path, repr(cost), "as a number", row=2, column="lineItem/UnblendedCost")


@pytest.mark.parametrize("cost", ["", "NULL", "null", "NaN"])
def test_no_value_in_a_required_money_column(seeded: Path, tmp_path: Path, cost: str) -> None:
    """NULL words read as NULL; in the cost the format requires that is still an error naming file, row and column."""
    path = put(tmp_path, "cost.csv", csv_text([row(), row(cost=cost)]))
    assert_refused(seeded, path, f"no value ({cost!r})", "aws-cur requires", row=2, column="lineItem/UnblendedCost")


def test_nan_and_inf_in_parquet(seeded: Path, tmp_path: Path) -> None:
    t = pq.read_table(PARQUET)
    i = t.schema.get_field_index("line_item_unblended_cost")
    for bad in (math.nan, math.inf):
        vals = t.column(i).to_pylist()
        vals[2] = bad
        path = tmp_path / f"p{bad}" / "x.parquet"
        path.parent.mkdir()
        pq.write_table(t.set_column(i, "line_item_unblended_cost", pa.array(vals, pa.float64())), path)
        assert_refused(seeded, path, "as a number", row=3, column="line_item_unblended_cost")


def test_three_date_formats_and_time_zones(db: Path, tmp_path: Path) -> None:
    rows = [row(start="2026-10-01T05:00:00Z"), row(start="10/01/2026"), row(start="2026-10-01 05:00:00"),
            row(start="2026-10-01T07:00:00+02:00"), row(start="2026-10-01T00:00:00-05:00")]
    code, out, _ = ingest(db, put(tmp_path, "dates.csv", csv_text(rows)))
    assert code == 0, out
    with billing_audit.open(db) as store:
        got = [str(r[0]) for r in store.con.execute(
            "SELECT ChargePeriodStart FROM line_items ORDER BY x_SourceRow").fetchall()]
    assert got == ["2026-10-01 05:00:00", "2026-10-01 00:00:00", "2026-10-01 05:00:00", "2026-10-01 05:00:00",
                   "2026-10-01 05:00:00"]


def test_negative_costs_are_valid(db: Path, tmp_path: Path) -> None:
    code, out, _ = ingest(db, put(tmp_path, "credit.csv", csv_text([row(cost="-10.25", **{"lineItem/LineItemType": "Credit"}),
                                                                     row(cost="3")])))
    assert code == 0, out
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT sum(BilledCost) FROM line_items").fetchone() == (Decimal("-7.25"),)


def test_duplicate_money_column_is_refused(seeded: Path, tmp_path: Path) -> None:
    header = [*COLS, "lineItem/UnblendedCost"]
    path = put(tmp_path, "dup.csv", csv_text([[*row(), "9"]], header=header))
    assert_refused(seeded, path, "appears more than once", column="lineItem/UnblendedCost")


def test_columns_differing_only_by_case(db: Path, tmp_path: Path) -> None:
    """Tag columns whose keys differ only by case are one tag (first non-empty value); money columns are refused."""
    header = [*COLS, "resourceTags/user:Team", "resourceTags/user:TEAM"]
    path = put(tmp_path, "case.csv", csv_text([[*row(team=""), "nlp", "speech"], [*row(), "", "x"]], header=header))
    code, out, _ = ingest(db, path)
    assert code == 0, out
    with billing_audit.open(db) as store:
        tags = [r[0] for r in store.con.execute("SELECT Tags FROM line_items ORDER BY x_SourceRow").fetchall()]
    assert tags == [{"team": "nlp"}, {"team": "vision"}]
    bad = put(tmp_path, "case2.csv", csv_text([[*row(), "2"]], header=[*COLS, "lineitem/unblendedcost"]))
    code, out, _ = ingest(db, bad)
    assert code == 2 and "appears more than once" in out


def test_ten_thousand_tag_keys_on_one_line(db: Path, tmp_path: Path) -> None:
    header = [*COLS, *[f"resourceTags/user:k{i}" for i in range(10_000)]]
    values = [*row(), *[f"v{i}" for i in range(10_000)]]
    code, out, _ = ingest(db, put(tmp_path, "tags.csv", csv_text([values], header=header)))
    assert code == 0, out
    with billing_audit.open(db) as store:
        tags = store.con.execute("SELECT Tags FROM line_items").fetchone()[0]
    assert len(tags) == 10_001 and tags["k9999"] == "v9999"


def test_hostile_tag_values_are_data(db: Path, tmp_path: Path) -> None:
    evil = '=cmd|\' /C calc\'!A0\n"quoted", \'single\''
    code, out, _ = ingest(db, put(tmp_path, "evil.csv", csv_text([row(team=evil)])))
    assert code == 0, out
    with billing_audit.open(db) as store:
        assert store.con.execute("SELECT Tags['team'] FROM line_items").fetchone() == (evil.strip(),)
        store.tag()
    out_csv = tmp_path / "teams.csv"
    r = CliRunner().invoke(main, ["export", "--db", str(db), "--by", "team", "--out", str(out_csv)])
    assert r.exit_code == 0, r.output
    cells = [c for rec in csv.reader(io.StringIO(out_csv.read_text())) for c in rec]
    assert "'" + evil.strip().lower() in cells
