"""Issue #14, real exports as they come: CSV quirks read exactly, or refused naming the reason.

The fixtures are fixtures/csv-quirks/ (fixtures/gen_csv_quirks.py); bad files are written here, into tmp_path.
Expected values are read from the files with Python's csv module and Decimal, not through billing-audit.
"""

from __future__ import annotations

import csv
import gzip
import io
import tempfile
from datetime import datetime
from decimal import Decimal
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit import reader
from billing_audit.cli import main
from support import FIXTURES, dump_line_items

QUIRKS = FIXTURES / "csv-quirks"
MIXED = next((QUIRKS / "mixed-line-endings").rglob("*.csv"))
CR_QUOTED = next((QUIRKS / "cr-in-quoted-field").rglob("*.csv"))
NULLS = next((QUIRKS / "null-literals").rglob("*.csv"))
SEMICOLON = next((QUIRKS / "semicolon-decimal-comma").rglob("*.csv"))
MDYY = next((QUIRKS / "focus-mdyy-dates").rglob("*.csv"))
NULL_WORDS = {"", "NULL", "null", "NaN"}


def records(path: Path, delimiter: str = ",") -> list[dict[str, str]]:
    raw = path.read_bytes()
    if path.name.endswith(".gz"):
        raw = gzip.decompress(raw)
    return list(csv.DictReader(io.StringIO(raw.decode("utf-8-sig"), newline=""), delimiter=delimiter))


def dec(v: str, comma: bool = False) -> Decimal | None:
    v = v.strip()
    if v in NULL_WORDS:
        return None
    return Decimal(v.replace(".", "").replace(",", ".") if comma else v)


def by_currency(rows: list[dict[str, str]], cost: str, currency: str, comma: bool = False) -> dict[str, tuple[int, Decimal]]:
    out: dict[str, tuple[int, Decimal]] = {}
    for r in rows:
        n, total = out.get(r[currency], (0, Decimal(0)))
        out[r[currency]] = (n + 1, total + (dec(r[cost], comma) or Decimal(0)))
    return out


def ingest(db: Path, path: Path) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["ingest", str(path), "--db", str(db)])
    assert r.exception is None or isinstance(r.exception, SystemExit), r.output
    return r.exit_code, r.output


def stored(db: Path, path: Path) -> dict[str, tuple[int, Decimal]]:
    with billing_audit.open(db) as store:
        rows = store.con.execute("SELECT BillingCurrency, count(*), sum(BilledCost) FROM line_items "
                                 "WHERE x_SourceFile = ? GROUP BY 1", [str(path)]).fetchall()
    return {c: (n, t) for c, n, t in rows}


def assert_exact(db: Path, path: Path, want: dict[str, tuple[int, Decimal]]) -> None:
    got = stored(db, path)
    assert set(got) == set(want)
    for cur, (n, total) in want.items():
        assert got[cur][0] == n, cur
        assert abs(got[cur][1] - total) <= Decimal("0.000001"), (cur, got[cur][1], total)


def column(db: Path, path: Path, expr: str) -> list[object]:
    with billing_audit.open(db) as store:
        return [r[0] for r in store.con.execute(f"SELECT {expr} FROM line_items WHERE x_SourceFile = ? ORDER BY x_SourceRow",
                                                [str(path)]).fetchall()]


def put(tmp_path: Path, name: str, data: bytes | str) -> Path:
    folder = tmp_path / name.replace(".", "_")
    folder.mkdir()
    p = folder / name
    p.write_bytes(data if isinstance(data, bytes) else data.encode())
    return p


def refused(db: Path, path: Path, *words: str, row: int | None = None, col: str | None = None) -> str:
    with billing_audit.open(db) as store:
        before = dump_line_items(store.con), store.summary().rows()
    code, out = ingest(db, path)
    assert code == 2, out
    line = next(ln for ln in out.splitlines() if ln.startswith("error: "))
    assert str(path) in line, out
    for w in words:
        assert w in line, line
    if row is not None:
        assert f"row {row}" in line, line
    if col is not None:
        assert f"column {col!r}" in line, line
    with billing_audit.open(db) as store:
        assert (dump_line_items(store.con), store.summary().rows()) == before
    return line


def text_of(rows: list[list[str]], delimiter: str = ",", eol: str = "\n") -> str:
    buf = io.StringIO()
    csv.writer(buf, delimiter=delimiter, lineterminator=eol).writerows(rows)
    return buf.getvalue()


# -- 1: mixed line endings --------------------------------------------------------------------------


def _duckdb_fast_path_fails(path: Path) -> None:
    names = reader.csv_header(path, str(path))
    with pytest.raises(duckdb.Error, match="state machine"):
        duckdb.connect().execute(f"SELECT count(*) FROM {reader.reader_sql(path, 'csv', names)}").fetchall()


def test_mixed_line_endings_fixture(db: Path) -> None:
    data = MIXED.read_bytes()
    assert data.endswith(b"\n") and not data.endswith(b"\r\n") and data.count(b"\r\n") == data.count(b"\n") - 1
    _duckdb_fast_path_fails(MIXED)  # the quirk is real: the plain DuckDB read refuses it
    code, out = ingest(db, MIXED)
    assert code == 0, out
    rows = records(MIXED)
    assert_exact(db, MIXED, by_currency(rows, "costInBillingCurrency", "billingCurrency"))
    assert column(db, MIXED, "strftime(ChargePeriodStart, '%Y-%m-%d')") == [r["date"][:10] for r in rows]
    assert set(column(db, MIXED, "strftime(BillingPeriodStart, '%Y-%m-%d')")) == {"2026-10-01"}


def test_cr_only_line_endings(db: Path, tmp_path: Path) -> None:
    """Classic Mac files end every row with a bare CR: read directly (the header too)."""
    path = put(tmp_path, "cr.csv", MIXED.read_bytes().replace(b"\r\n", b"\n").replace(b"\n", b"\r"))
    assert reader.needs_line_ending_rewrite(path) is None
    assert ingest(db, path)[0] == 0
    assert_exact(db, path, by_currency(records(MIXED), "costInBillingCurrency", "billingCurrency"))


def _big_mixed(tmp_path: Path, name: str, gz: bool, lf_row: int | None) -> tuple[Path, list[dict[str, str]]]:
    """Over a MB of the MCA fixture's rows: CRLF rows; one LF row past the sniffed first MB (or the last)."""
    lines = MIXED.read_bytes().split(b"\r\n")
    header, body = lines[0], [ln for ln in lines[1:] if ln.strip()]
    body = [b.rstrip(b"\n") for b in body]
    many = body * (1 + (3 << 20) // sum(len(b) for b in body))
    assert lf_row is None or (1 << 20) < sum(len(b) for b in many[:lf_row]) < sum(len(b) for b in many) - (1 << 16)
    ends = [b"\r\n"] * len(many)
    ends[lf_row if lf_row is not None else -1] = b"\n"
    data = header + b"\r\n" + b"".join(b + e for b, e in zip(many, ends, strict=True))
    path = put(tmp_path, name, gzip.compress(data) if gz else data)
    return path, records(path)


@pytest.mark.parametrize("gz, lf_row", [(True, None), (False, 2_500)], ids=["gz-last-row", "plain-mid-file"])
def test_mixed_line_endings_past_the_first_mb(db: Path, tmp_path: Path, gz: bool, lf_row: int | None) -> None:
    """The sniff cannot see it (a .gz tail, a row in the middle): DuckDB's refusal makes the read retry normalised."""
    path, rows = _big_mixed(tmp_path, "big.csv.gz" if gz else "big.csv", gz, lf_row)
    assert reader.needs_line_ending_rewrite(path) is None
    code, out = ingest(db, path)
    assert code == 0, out
    assert_exact(db, path, by_currency(rows, "costInBillingCurrency", "billingCurrency"))


def _no_rewrite(*a: object) -> None:
    raise AssertionError("a clean file was rewritten")


def test_the_fast_path_stays_for_clean_files(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "rewrite_line_endings", _no_rewrite)
    code, out = ingest(db, FIXTURES / "focus" / "gcp-focus-1.0")
    assert code == 0, out


def test_temporary_copies_are_removed(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(tmp))
    assert ingest(db, MIXED)[0] == 0
    bad = put(tmp_path, "bad.csv", MIXED.read_bytes().replace(b"2026-10-02T", b"not a date "))
    assert ingest(db, bad)[0] == 2
    assert list(tmp.iterdir()) == []


def test_a_rewrite_stops_when_the_temp_folder_fills(db: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(reader, "TEMP_RESERVE", 1 << 60)
    refused(db, MIXED, "not enough free space", "TMPDIR")


# -- 11: a bare CR inside a quoted field ----------------------------------------------------------------


def test_bare_cr_inside_a_quoted_field(db: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Data, not a line ending: read on the fast path (no rewrite), the CR kept in the value."""
    assert b"\r\n" not in CR_QUOTED.read_bytes() and CR_QUOTED.read_bytes().count(b"\r") == 3
    monkeypatch.setattr(reader, "rewrite_line_endings", _no_rewrite)
    code, out = ingest(db, CR_QUOTED)
    assert code == 0, out
    rows = records(CR_QUOTED)
    assert_exact(db, CR_QUOTED, by_currency(rows, "CostInBillingCurrency", "BillingCurrencyCode"))
    assert column(db, CR_QUOTED, "ChargeDescription") == [r["ProductName"] for r in rows]
    assert "\r" in rows[4]["ProductName"]
    assert column(db, CR_QUOTED, "Tags")[3] == {"env": "research", "owner": "lab"}
    assert column(db, CR_QUOTED, "strftime(ChargePeriodStart, '%Y-%m-%d')") == [
        "2026-10-01", "2026-10-02", "2026-10-13", "2026-10-14", "2026-10-30"]


def test_bare_cr_inside_a_quoted_field_of_a_mixed_file(db: Path, tmp_path: Path) -> None:
    data = CR_QUOTED.read_bytes()
    data = data.replace(b"\n", b"\r\n", 3)  # the header and two rows CRLF, the rest LF
    path = put(tmp_path, "cr-mixed.csv", data)
    assert reader.needs_line_ending_rewrite(path) is not None
    assert ingest(db, path)[0] == 0
    rows = records(CR_QUOTED)
    assert column(db, path, "ChargeDescription") == [r["ProductName"] for r in rows]
    assert_exact(db, path, by_currency(rows, "CostInBillingCurrency", "BillingCurrencyCode"))


def test_rewrite_keeps_quoted_values_byte_for_byte(tmp_path: Path) -> None:
    src = tmp_path / "in.csv"
    src.write_bytes(b'a,b\r\n"x\ry","p\nq"\n"r\r\ns",t\rlast,"""q""\r"\n')
    dst = tmp_path / "out.csv"
    reader.rewrite_line_endings(src, dst, str(src))
    assert dst.read_bytes() == b'a,b\r\n"x\ry","p\nq"\r\n"r\r\ns",t\r\nlast,"""q""\r"\r\n'
    with open(dst, newline="") as f:
        got = list(csv.reader(f))
    assert got == [
        ["a", "b"], ["x\ry", "p\nq"], ["r\r\ns", "t"], ["last", '"q"\r']]


# -- 6: NULL, null, NaN and empty cells ------------------------------------------------------------------


def test_null_literals_read_as_null(db: Path) -> None:
    code, out = ingest(db, NULLS)
    assert code == 0, out
    rows = records(NULLS)
    assert_exact(db, NULLS, by_currency(rows, "BilledCost", "BillingCurrency"))
    assert column(db, NULLS, "ConsumedQuantity") == [dec(r["ConsumedQuantity"]) for r in rows]
    assert column(db, NULLS, "ListUnitPrice") == [dec(r["ListUnitPrice"]) for r in rows]
    assert column(db, NULLS, "ContractedCost") == [dec(r["ContractedCost"]) for r in rows]
    assert column(db, NULLS, "ListCost") == [dec(r["ListCost"]) or dec(r["BilledCost"]) for r in rows]
    assert column(db, NULLS, "ChargePeriodEnd") == [
        None if r["ChargePeriodEnd"] in NULL_WORDS else datetime.fromisoformat(r["ChargePeriodEnd"]).replace(tzinfo=None)
        for r in rows]
    assert None in column(db, NULLS, "ConsumedQuantity") and None in column(db, NULLS, "ChargePeriodEnd")
    assert rows[3]["Tags"] == "NULL" and column(db, NULLS, "Tags")[3] == {} and column(db, NULLS, "x_TagsRaw")[3] is None


@pytest.mark.parametrize("word", ["NULL", "null", "NaN", ""])
def test_no_billed_cost_is_still_an_error(db: Path, tmp_path: Path, word: str) -> None:
    rows = records(NULLS)
    header = list(rows[0])
    rows[3]["BilledCost"] = word
    path = put(tmp_path, "focus.csv", text_of([header, *[[r[c] for c in header] for r in rows]]))
    refused(db, path, f"no value ({word!r})", "focus requires", row=4, col="BilledCost")


# -- 7: semicolon delimiter, decimal comma ----------------------------------------------------------------


def test_semicolon_and_decimal_comma(db: Path) -> None:
    assert SEMICOLON.read_bytes().startswith(b"\xef\xbb\xbfInvoiceSectionName;AccountName;")
    code, out = ingest(db, SEMICOLON)
    assert code == 0, out
    rows = records(SEMICOLON, ";")
    assert any("." in r["Quantity"] and "," in r["CostInBillingCurrency"] for r in rows)  # 5.312 and 1.223,8848
    want = by_currency(rows, "CostInBillingCurrency", "BillingCurrencyCode", comma=True)
    assert_exact(db, SEMICOLON, want)
    assert column(db, SEMICOLON, "ConsumedQuantity") == [dec(r["Quantity"], comma=True) for r in rows]
    assert str(column(db, SEMICOLON, "typeof(BilledCost)")[0]).startswith("DECIMAL")
    # D/M/YYYY: 13/10 makes the file day first, so 2/10 is the 2nd of October, not February 10th
    assert column(db, SEMICOLON, "strftime(ChargePeriodStart, '%Y-%m-%d')") == [
        "2026-10-01", "2026-10-02", "2026-10-13", "2026-10-24", "2026-10-31"]
    assert set(column(db, SEMICOLON, "strftime(BillingPeriodEnd, '%Y-%m-%d')")) == {"2026-11-01"}


def test_tab_delimited(db: Path, tmp_path: Path) -> None:
    rows = records(MIXED)
    header = list(rows[0])
    path = put(tmp_path, "tab.csv", text_of([header, *[[r[c] for c in header] for r in rows]], delimiter="\t"))
    assert ingest(db, path)[0] == 0
    assert_exact(db, path, by_currency(rows, "costInBillingCurrency", "billingCurrency"))


def test_mixed_decimal_marks_are_refused(db: Path, tmp_path: Path) -> None:
    text = SEMICOLON.read_bytes().decode("utf-8-sig")
    lines = text.split("\n")
    assert ";1.223,8848;" in lines[5]
    lines[5] = lines[5].replace(";1.223,8848;", ";1223.8848;")
    path = put(tmp_path, "mixed-marks.csv", "\n".join(lines))
    refused(db, path, "semicolon-delimited", "decimal comma ('0,0528' on row 1, column 'CostInBillingCurrency')",
            "decimal point ('1223.8848' on row 5, column 'CostInBillingCurrency')")


def test_other_delimiters_are_named(db: Path, tmp_path: Path) -> None:
    text = MIXED.read_bytes().decode().replace(",", "|")
    refused(db, put(tmp_path, "pipes.csv", text), "single column", "delimited by '|'")


# -- 5: dates -----------------------------------------------------------------------------------------------


def test_focus_example_dates_mdyy(db: Path) -> None:
    code, out = ingest(db, MDYY)
    assert code == 0, out
    assert_exact(db, MDYY, by_currency(records(MDYY), "BilledCost", "BillingCurrency"))
    assert [str(v) for v in column(db, MDYY, "ChargePeriodStart")] == [
        "2025-05-01 00:00:00", "2025-05-14 13:00:00", "2025-05-31 23:00:00", "2025-05-02 00:00:00"]
    assert str(column(db, MDYY, "ChargePeriodEnd")[2]) == "2025-06-01 00:00:00"
    assert set(column(db, MDYY, "strftime(BillingPeriodStart, '%Y-%m-%d') || '/' || strftime(BillingPeriodEnd, '%Y-%m-%d')")) == {
        "2025-05-01/2025-06-01"}
    with billing_audit.open(db) as store:
        assert store.summary()["period"].to_list() == ["2025-05"]


def _focus_file(tmp_path: Path, name: str, starts: list[str]) -> Path:
    rows = records(MDYY)
    header = list(rows[0])
    out = []
    for i, s in enumerate(starts):
        r = dict(rows[i % len(rows)], ChargePeriodStart=s, ChargePeriodEnd="", BillingPeriodStart="",
                 BillingPeriodEnd="")
        out.append([r[c] for c in header])
    return put(tmp_path, name, text_of([header, *out]))


@pytest.mark.parametrize("value, want", [
    ("2026-10-05", "2026-10-05 00:00:00"),
    ("2026-10-05T07:30", "2026-10-05 07:30:00"),
    ("2026-10-05T07:30:15Z", "2026-10-05 07:30:15"),
    ("2026-10-05T07:30:15.1234567Z", "2026-10-05 07:30:15.123456"),
    ("2026-10-05T09:30:15+02:00", "2026-10-05 07:30:15"),
    ("2026-10-05 07:30:15 UTC", "2026-10-05 07:30:15"),
    ("10/5/2026", "2026-10-05 00:00:00"),
    ("10/5/26", "2026-10-05 00:00:00"),
    ("10/05/2026 07:30:15 PM", "2026-10-05 19:30:15"),
    ("10/05/2026 12:00:00 AM", "2026-10-05 00:00:00"),
])
def test_date_shapes(db: Path, tmp_path: Path, value: str, want: str) -> None:
    path = _focus_file(tmp_path, "d.csv", [value])
    code, out = ingest(db, path)
    assert code == 0, out
    assert [str(v) for v in column(db, path, "ChargePeriodStart")] == [want]


def test_day_month_order_comes_from_the_whole_column(db: Path, tmp_path: Path) -> None:
    """An ambiguous date early on is read as the unambiguous one far later says (not row by row)."""
    path = _focus_file(tmp_path, "dm.csv", ["3/4/2026"] * 30_000 + ["25/4/2026"])
    assert ingest(db, path)[0] == 0
    assert set(column(db, path, "strftime(ChargePeriodStart, '%Y-%m-%d')")) == {"2026-04-03", "2026-04-25"}


def test_both_day_month_orders_are_refused(db: Path, tmp_path: Path) -> None:
    path = _focus_file(tmp_path, "both.csv", ["3/4/2026", "25/4/2026", "4/3/2026", "4/25/2026"])
    refused(db, path, "both day/month orders", "'25/4/2026' (row 2", "'4/25/2026' (row 4")


@pytest.mark.parametrize("value", ["5/1/99", "0025-05-01", "1970-01-01T00:00:00Z", "5/1/2031"])
def test_implausible_dates_are_refused(db: Path, tmp_path: Path, value: str) -> None:
    path = _focus_file(tmp_path, "old.csv", ["5/1/25", value])
    refused(db, path, "implausible", row=2, col="ChargePeriodStart")


# -- 8: refusals name the reason --------------------------------------------------------------------------


def test_focus_without_billing_account_names_what_it_lacks(db: Path, tmp_path: Path) -> None:
    rows = records(NULLS)
    header = [c for c in rows[0] if c != "BillingAccountId"]
    path = put(tmp_path, "focus.csv", text_of([header, *[[r[c] for c in header] for r in rows]]))
    refused(db, path, "most resembles focus", "lacks the required column BillingAccountId")


def test_a_row_with_more_fields_than_the_header(db: Path, tmp_path: Path) -> None:
    lines = SEMICOLON.read_bytes().decode("utf-8-sig").split("\n")
    lines[3] += ";extra"
    refused(db, put(tmp_path, "long.csv", "\n".join(lines)), "the header has 55 columns, this row 56 fields", row=3)
