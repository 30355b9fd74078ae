"""Property tests and bounded fuzzing of the readers, small parsers and normalisation (hypothesis)."""

from __future__ import annotations

import csv
import io
import json
import random
import tempfile
from decimal import ROUND_HALF_UP, Context, Decimal
from pathlib import Path

import duckdb
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import billing_audit
from billing_audit.config import load_config
from billing_audit.deliveries import group
from billing_audit.errors import BillingAuditError
from billing_audit.reader import install_macros
from billing_audit.report import build_report
from billing_audit.rules import RuleError, parse_rule_file
from support import FIXTURES

SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
SLOW = settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])

JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=5),
    max_leaves=20,
)


@pytest.fixture(scope="module")
def con() -> duckdb.DuckDBPyConnection:
    c = duckdb.connect()
    install_macros(c)
    return c


@SETTINGS
@given(text=st.text(max_size=300))
def test_azure_tag_strings_never_crash(con: duckdb.DuckDBPyConnection, text: str) -> None:
    tags, malformed = con.execute("SELECT ba_tags(ba_json_tags($s)), ba_tags_malformed($s)", {"s": text}).fetchone()
    ws = " \t\n\r\x0b\x0c"  # JSON's and SQL's blanks; not str.strip()'s, which also takes \x1c-\x1f
    if tags:
        assert all(k and k == k.strip(ws) for k in tags)
        assert all(v and v == v.strip(ws) for v in tags.values())
    if text.strip(ws) in ("", "{}"):
        assert not malformed


@SETTINGS
@given(pairs=st.dictionaries(st.text(min_size=1, max_size=15), st.text(min_size=1, max_size=15), max_size=6))
def test_azure_tags_with_and_without_braces_agree(con: duckdb.DuckDBPyConnection, pairs: dict[str, str]) -> None:
    body = json.dumps(pairs)
    with_braces, without = con.execute(
        "SELECT ba_tags(ba_json_tags($a)), ba_tags(ba_json_tags($b))", {"a": body, "b": body[1:-1]}).fetchone()
    assert with_braces == without
    normal = {con.execute("SELECT lower(ba_ws($k))", {"k": k}).fetchone()[0] for k, v in pairs.items()
              if con.execute("SELECT ba_ws($v) <> '' AND ba_ws($k) <> ''", {"k": k, "v": v}).fetchone()[0]}
    assert set(with_braces or {}) == normal


@SETTINGS
@given(doc=JSON, name=st.sampled_from(["manifest.json", "_manifest.json", "r-Manifest.json"]))
def test_manifests_never_crash(doc: object, name: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "run"
        folder.mkdir()
        (folder / name).write_text(json.dumps(doc))
        deliveries, errors = group([folder])
        assert deliveries == [] or all(d.files for d in deliveries)
        assert all(isinstance(e, BillingAuditError) for e in errors)


@SETTINGS
@given(header=st.text(max_size=200), sql=st.text(max_size=100))
def test_rule_headers_fail_only_with_rule_errors(header: str, sql: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "TM100_x.sql"
        path.write_text(f"/*\n{header.replace('*/', '')}\n*/\n{sql}")
        try:
            parse_rule_file(path)
        except RuleError as e:
            assert e.file == str(path) and e.reason


@SETTINGS
@given(text=st.text(max_size=200))
def test_config_fails_only_with_clear_errors(text: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "billing-audit.toml"
        path.write_text(text)
        try:
            load_config(path)
        except BillingAuditError as e:
            assert str(path) in str(e)


HEADER = ["lineItem/UsageStartDate", "lineItem/UsageEndDate", "lineItem/LineItemType", "lineItem/UnblendedCost",
          "bill/PayerAccountId", "lineItem/UsageType", "lineItem/LineItemDescription", "resourceTags/user:Team"]
# number texts as exports write them: Azure's unrounded costs carry 17 to 22 significant digits
NUMBER_TEXT = st.one_of(
    st.decimals(min_value=Decimal("-2e6"), max_value=Decimal("2e6"), places=22, allow_nan=False).map(str),
    st.decimals(min_value=Decimal("-1e16"), max_value=Decimal("1e16"), places=4, allow_nan=False).map(str),
    st.floats(min_value=-2e6, max_value=2e6, allow_nan=False).map(repr),
    st.floats(min_value=-2e6, max_value=2e6, allow_nan=False).map(lambda f: f"{f:.25f}"),
    st.sampled_from(["999999.9999999999995", "999999.9999999999994", "-999999.9999999999995", "0.0000000000005",
                     "-0.00000000000049999", "1e6", "1E-13", "+1.5", ".5", "1.", "1_000", "abc", "1e400", " 2.5 "]),
)


@SETTINGS
@given(texts=st.lists(NUMBER_TEXT, min_size=1, max_size=40))
def test_a_number_text_reads_as_the_wide_decimal_reads_it(con: duckdb.DuckDBPyConnection, texts: list[str]) -> None:
    """ba_num / ba_try_num read a text through DECIMAL(18,12) where it fits (fast): the same value DuckDB's
    DECIMAL(38,12) gives it, extra digits rounded alike, and what it cannot read is NULL (try) or an error."""
    rows = con.execute("SELECT v, ba_try_num(v), TRY_CAST(trim(v) AS DECIMAL(38,12)) FROM unnest($t) u(v)",
                       {"t": texts}).fetchall()
    for text, got, wide in rows:
        assert got == wide, text
        if wide is not None and "e" not in text.lower() and "_" not in text:
            exact = Decimal(text.strip()).quantize(Decimal("1e-12"), rounding=ROUND_HALF_UP, context=Context(prec=60))
            assert got == exact, text
        if wide is None:
            with pytest.raises(duckdb.Error):
                con.execute("SELECT ba_num($v)", {"v": text}).fetchone()
        else:
            assert con.execute("SELECT ba_num($v)", {"v": text}).fetchone() == (wide,)


MONEY = st.decimals(min_value=Decimal("-1000"), max_value=Decimal("100000"), places=10, allow_nan=False)


def _csv(rows: list[tuple[Decimal, str, str]]) -> str:
    buf = io.StringIO()
    w = csv.writer(buf)
    w.writerow(HEADER)
    for i, (cost, desc, team) in enumerate(rows):
        w.writerow([f"2026-10-{1 + i % 28:02d}T00:00:00Z", f"2026-10-{1 + i % 28:02d}T01:00:00Z",
                    "Credit" if cost < 0 else "Usage", format(cost, "f"), "012345678901",
                    "USE1-SpotUsage:p4d.24xlarge", desc, team])
    return buf.getvalue()


@SLOW
@given(rows=st.lists(st.tuples(MONEY, st.text(max_size=40), st.text(max_size=10)), min_size=1, max_size=40))
def test_cost_totals_are_conserved(rows: list[tuple[Decimal, str, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "cur"
        folder.mkdir()
        (folder / "cur-1.csv").write_text(_csv(rows), encoding="utf-8")
        with billing_audit.open(Path(tmp) / "s.duckdb") as store:
            report = store.ingest([folder])
            assert not report.errors, report.errors
            got = store.con.execute("SELECT sum(BilledCost), count(*) FROM line_items").fetchone()
            assert got == (sum(r[0] for r in rows), len(rows))
            again = store.ingest([folder])
            assert again.count("unchanged") == 1
            assert store.con.execute("SELECT sum(BilledCost), count(*) FROM line_items").fetchone() == got


def _report_numbers(folders: list[Path], db: Path) -> list[tuple[object, ...]]:
    with billing_audit.open(db) as store:
        for f in folders:
            assert not store.ingest([f]).errors
        store.tag()
        rep = build_report(store, load_config(FIXTURES / "scenarios/billing-audit.toml"), "2026-11")
        rows = rep.jobs.drop("reasons").rows()
    return sorted(rows, key=repr)


@SLOW
@given(seed=st.integers(0, 10_000))
def test_row_order_and_ingest_order_change_no_report(seed: int, tmp_path_factory: pytest.TempPathFactory) -> None:
    tmp = tmp_path_factory.mktemp("order")
    src = FIXTURES / "scenarios"
    reference = _report_numbers([src / "aws-cur-csv", src / "azure-ea-eur"], tmp / "ref.duckdb")
    rng = random.Random(seed)
    shuffled = []
    for name, pattern in (("aws-cur-csv", "*/*.csv"), ("azure-ea-eur", "*/*.csv")):
        f = next((src / name).glob(pattern))
        lines = f.read_bytes().decode("utf-8-sig").splitlines(keepends=True)
        body = lines[1:]
        rng.shuffle(body)
        out = tmp / f"shuffled-{name}" / f.parent.name / f.name
        out.parent.mkdir(parents=True)
        out.write_text(lines[0] + "".join(body), encoding="utf-8")
        shuffled.append(out.parent)
    rng.shuffle(shuffled)
    assert _report_numbers(shuffled, tmp / "shuffled.duckdb") == reference


# -- no input reaches a traceback: every CSV fixture (and some parquet/json), mutated, through the CLI ----------

FUZZ_TEXT = sorted(p for p in FIXTURES.rglob("*") if p.name.endswith((".csv", ".csv.gz")))
FUZZ_BINARY = [next(FIXTURES.glob("aws/cur-legacy-parquet/**/*.parquet")), next(FIXTURES.glob("gcp/**/*.json*"))]
MUTATIONS = ("crlf", "lf", "cr", "mixed-eol", "semicolon", "tab", "bom", "no-bom", "null-cells", "truncate",
             "shuffle-columns", "flip-byte")


def _mutate_text(data: bytes, how: str, rng: random.Random) -> bytes:
    bom = b"\xef\xbb\xbf"
    if how in ("crlf", "lf", "cr", "mixed-eol"):
        lines = data.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        ends = {"crlf": [b"\r\n"], "lf": [b"\n"], "cr": [b"\r"], "mixed-eol": [b"\r\n", b"\n", b"\r"]}[how]
        return b"".join(ln + rng.choice(ends) for ln in lines[:-1]) + lines[-1]
    if how in ("semicolon", "tab"):
        return data.replace(b",", b";" if how == "semicolon" else b"\t")
    if how == "bom":
        return bom + data
    if how == "no-bom":
        return data.removeprefix(bom)
    if how == "null-cells":
        lines = data.split(b"\n")
        for _ in range(rng.randint(1, 6)):
            i = rng.randrange(1, len(lines)) if len(lines) > 1 else 0
            cells = lines[i].split(b",")
            cells[rng.randrange(len(cells))] = rng.choice([b"NULL", b"null", b"NaN", b""])
            lines[i] = b",".join(cells)
        return b"\n".join(lines)
    if how == "truncate":
        last = data.rstrip(b"\r\n").rfind(b"\n")
        return data[: rng.randint(max(last, 0), len(data))]
    if how == "shuffle-columns":
        text = data.decode("utf-8", errors="replace")
        recs = list(csv.reader(io.StringIO(text, newline="")))
        if not recs:
            return data
        order = list(range(len(recs[0])))
        rng.shuffle(order)
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([[r[i] for i in order if i < len(r)] for r in recs])
        return buf.getvalue().encode()
    return _flip(data, rng)


def _flip(data: bytes, rng: random.Random) -> bytes:
    if not data:
        return data
    i = rng.randrange(len(data))
    return data[:i] + bytes([rng.randrange(256)]) + data[i + 1:]


@pytest.fixture(scope="module")
def seeded_store(tmp_path_factory: pytest.TempPathFactory) -> Path:
    db = tmp_path_factory.mktemp("fuzz") / "seed.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([FIXTURES / "focus" / "gcp-focus-1.0"]).errors
    return db


@pytest.mark.slow
@SETTINGS
@given(which=st.integers(0, len(FUZZ_TEXT) + len(FUZZ_BINARY) - 1),
       hows=st.lists(st.sampled_from(MUTATIONS), min_size=1, max_size=3), seed=st.integers(0, 2**32 - 1),
       gz=st.booleans())
def test_no_input_reaches_a_traceback(seeded_store: Path, which: int, hows: list[str], seed: int, gz: bool) -> None:
    """``ingest`` on a mutated export exits 0 or 2; on 2 one ``error:`` line names the file and the store is as it was."""
    import gzip
    import shutil

    from click.testing import CliRunner

    from billing_audit.cli import main
    from support import dump_line_items

    rng = random.Random(seed)
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "store.duckdb"
        shutil.copy(seeded_store, db)
        folder = Path(tmp) / "in"
        folder.mkdir()
        if which < len(FUZZ_TEXT):
            src = FUZZ_TEXT[which]
            data = src.read_bytes()
            if src.name.endswith(".gz"):
                data = gzip.decompress(data)
            for how in hows:
                data = _mutate_text(data, how, rng)
            path = folder / ("export.csv.gz" if gz else "export.csv")
            path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
        else:
            src = FUZZ_BINARY[which - len(FUZZ_TEXT)]
            data = src.read_bytes()
            for how in hows:
                data = _flip(data, rng) if how != "truncate" else data[: rng.randrange(len(data))]
            path = folder / src.name
            path.write_bytes(data)
        with billing_audit.open(db) as store:
            before = (store.summary().rows(), dump_line_items(store.con))
        r = CliRunner().invoke(main, ["ingest", str(path), "--db", str(db)])
        assert r.exception is None or isinstance(r.exception, SystemExit), (src, hows, r.output)
        assert "Traceback" not in r.output
        assert r.exit_code in (0, 2), r.output
        if r.exit_code == 2:
            lines = r.output.strip().splitlines()
            errors = [ln for ln in lines if ln.startswith("error: ")]
            assert errors and all(str(path) in ln for ln in errors), (src, hows, r.output)
            assert all(ln.startswith("error: ") for ln in lines[:-1]), ("one line per error", src, hows, r.output)
            with billing_audit.open(db) as store:
                assert (store.summary().rows(), dump_line_items(store.con)) == before
