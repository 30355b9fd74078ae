"""Read one export file through DuckDB and map it onto canonical columns.

Python never holds the rows: this module only builds SQL.  The source is
exposed as ``src`` (declared columns parsed by kind, absent ones NULL, plus the
1-based record number ``_row``) and the format's SELECT maps it.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import re
import shutil
import tempfile
import zipfile
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import duckdb

from billing_audit import formats as fm
from billing_audit import schema
from billing_audit.errors import InputError, UnknownFormatError
from billing_audit.sql import ident, lit

NUMERIC_TYPES = {"DOUBLE", "FLOAT", "REAL", "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT",
                 "UINTEGER", "USMALLINT", "UTINYINT"}
DATA_SUFFIXES = (".parquet", ".csv", ".csv.gz", ".zip", ".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz")

MACROS = [
    # text -> DECIMAL; "" -> NULL; anything unreadable raises (diagnosed afterwards)
    """CREATE OR REPLACE TEMP MACRO ba_num(x) AS (
        CASE WHEN x IS NULL OR trim(CAST(x AS VARCHAR)) = '' THEN NULL
             ELSE CAST(trim(CAST(x AS VARCHAR)) AS DECIMAL(38,12)) END)""",
    """CREATE OR REPLACE TEMP MACRO ba_try_num(x) AS (
        CASE WHEN x IS NULL OR trim(CAST(x AS VARCHAR)) = '' THEN NULL
             ELSE TRY_CAST(trim(CAST(x AS VARCHAR)) AS DECIMAL(38,12)) END)""",
    """CREATE OR REPLACE TEMP MACRO ba_try_ts(x) AS (
        CASE WHEN x IS NULL OR trim(CAST(x AS VARCHAR)) = '' THEN NULL
             ELSE coalesce(
                try_strptime(trim(CAST(x AS VARCHAR)), ['%m/%d/%Y', '%m/%d/%Y %H:%M:%S', '%m/%d/%Y %I:%M:%S %p']),
                CAST(TRY_CAST(trim(CAST(x AS VARCHAR)) AS TIMESTAMPTZ) AS TIMESTAMP)) END)""",
    """CREATE OR REPLACE TEMP MACRO ba_ts(x) AS (
        CASE WHEN x IS NULL OR trim(CAST(x AS VARCHAR)) = '' THEN NULL
             ELSE coalesce(ba_try_ts(x), error('cannot read date ' || CAST(x AS VARCHAR))) END)""",
    # list of {k, v} -> MAP: keys trimmed and lower-cased, empty values dropped,
    # keys that differ only by case merged (first non-empty value in source order wins)
    """CREATE OR REPLACE TEMP MACRO ba_ws(x) AS (trim(x, chr(32) || chr(9) || chr(10) || chr(13) || chr(11) || chr(12)))""",
    """CREATE OR REPLACE TEMP MACRO ba_tags(entries) AS (
      map_from_entries(list_transform(
        list_sort(list_distinct(list_transform(
          list_filter(entries, lambda e: e.v IS NOT NULL AND ba_ws(e.v) <> '' AND e.k IS NOT NULL AND ba_ws(e.k) <> ''),
          lambda e: lower(ba_ws(e.k))))),
        lambda key: {'key': key, 'value': ba_ws(list_filter(entries,
          lambda e: e.k IS NOT NULL AND lower(ba_ws(e.k)) = key AND e.v IS NOT NULL AND ba_ws(e.v) <> '')[1].v)})))""",
    # the fast path when the keys are already normalised and unique (per-column tags: AWS legacy CUR)
    """CREATE OR REPLACE TEMP MACRO ba_tags_unique(entries) AS (
      map_from_entries(list_filter(list_transform(entries, lambda e: {'key': e.k, 'value': ba_ws(e.v)}),
                                   lambda e: e.value IS NOT NULL AND e.value <> '')))""",
    # JSON object text (with or without outer braces) -> list of {k, v}; NULL when malformed
    """CREATE OR REPLACE TEMP MACRO ba_json_obj(s) AS (
        CASE WHEN s IS NULL OR trim(s) = '' OR trim(s) = '{}' THEN NULL
             WHEN starts_with(trim(s), '{') THEN (CASE WHEN json_valid(trim(s)) AND json_type(trim(s)) = 'OBJECT' THEN trim(s) END)
             ELSE (CASE WHEN json_valid('{' || trim(s) || '}') THEN '{' || trim(s) || '}' END) END)""",
    """CREATE OR REPLACE TEMP MACRO ba_json_tags(s) AS (
        list_transform(map_entries(json_transform(ba_json_obj(s), '"MAP(VARCHAR, VARCHAR)"')),
                       lambda e: {'k': e.key, 'v': e.value}))""",
    """CREATE OR REPLACE TEMP MACRO ba_tags_malformed(s) AS (
        s IS NOT NULL AND trim(s) <> '' AND trim(s) <> '{}' AND ba_json_obj(s) IS NULL)""",
]


def install_macros(con: duckdb.DuckDBPyConnection) -> None:
    for m in MACROS:
        con.execute(m)


def fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def is_data_file(path: Path) -> bool:
    name = path.name.lower()
    if name.startswith(".") or "manifest" in name:
        return False
    return name.endswith(DATA_SUFFIXES)


def file_kind(path: Path) -> str:
    name = path.name.lower()
    if name.endswith(".parquet"):
        return "parquet"
    if name.endswith((".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz")):
        return "json"
    return "csv"


@contextmanager
def readable(path: Path) -> Iterator[list[tuple[Path, str]]]:
    """Yield (local path, display name) pairs DuckDB can read; unpacks .zip members."""
    if not path.name.lower().endswith(".zip"):
        yield [(path, str(path))]
        return
    tmp = Path(tempfile.mkdtemp(prefix="ba-zip-"))
    try:
        try:
            zf = zipfile.ZipFile(path)
        except zipfile.BadZipFile as e:
            raise InputError(str(path), f"not a readable zip archive ({e})") from None
        out: list[tuple[Path, str]] = []
        with zf:
            for info in zf.infolist():
                if info.is_dir() or not is_data_file(Path(info.filename)):
                    continue
                target = tmp / f"{len(out):04d}-{Path(info.filename).name}"
                with zf.open(info) as src, open(target, "wb") as dst:
                    shutil.copyfileobj(src, dst, 1 << 20)
                out.append((target, f"{path}!{info.filename}"))
        if not out:
            raise InputError(str(path), "zip archive holds no CSV or parquet file")
        yield out
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _sniff_text(path: Path, display: str) -> None:
    """Refuse text that is not UTF-8 before DuckDB gives a vaguer message."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    try:
        with opener(path, "rb") as f:
            head = f.read(1 << 16)
    except (OSError, EOFError) as e:
        raise InputError(display, f"cannot read file ({e})") from None
    if not head.strip():
        raise InputError(display, "file is empty")
    if head.startswith((b"\xff\xfe", b"\xfe\xff")):
        raise InputError(display, "file is UTF-16; billing-audit reads UTF-8 exports (re-save the file as UTF-8)")
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 4:  # not just a character cut at the buffer's end
            line = head[: e.start].count(b"\n") + 1
            raise InputError(
                display,
                f"not UTF-8 text (byte 0x{head[e.start]:02x} on line {line}); re-save the file as UTF-8",
                row=line - 1 if line > 1 else None,
            ) from None


def reader_sql(path: Path, kind: str, columns: list[str] | None = None) -> str:
    p = lit(str(path))
    if kind == "parquet":
        return f"read_parquet({p}, file_row_number=true)"
    if kind == "json":
        # sample the whole file: a key first seen late in a big export must not be dropped
        return f"read_json({p}, format='auto', maximum_object_size=67108864, sample_size=-1)"
    assert columns is not None, "CSV is read with the header's own column names"
    spec = ", ".join(f"{lit(c)}: 'VARCHAR'" for c in columns)
    return (
        f"read_csv({p}, header=true, auto_detect=false, columns={{{spec}}}, delim=',', quote='\"', escape='\"', "
        "strict_mode=true, null_padding=false, max_line_size=67108864, buffer_size=134217728)"
    )


DUP_MARK = "#dup"
_DUP = re.compile(re.escape(DUP_MARK) + r"\d+$")


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def csv_header(path: Path, display: str) -> list[str]:
    """The first record of a CSV file (BOM removed); duplicate names get a numeric suffix."""
    opener = gzip.open if path.name.lower().endswith(".gz") else open
    with opener(path, "rb") as f:
        head = f.read(1 << 20)
    text = head.decode("utf-8-sig", errors="replace")
    first = next(csv.reader(io.StringIO(text)), [])
    if not any(c.strip() for c in first):
        raise InputError(display, "file has no header row")
    names: list[str] = []
    seen: dict[str, int] = {}
    for raw in first:
        name = raw.strip() or f"column{len(names) + 1}"
        key = name.lower()
        if key in seen:  # DuckDB needs unique names; MappedFile sees through the #n suffix
            seen[key] += 1
            name = f"{name}{DUP_MARK}{seen[key]}"
        else:
            seen[key] = 1
        names.append(name)
    return names


def explain_duckdb_error(e: Exception) -> str:
    msg = str(e).strip()
    msg = re.sub(r"^[A-Za-z ]+Error: ", "", msg)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].startswith("CSV Error on Line"):
        m = re.search(r"(Value with unterminated quote found|Expected Number of Columns: \d+ Found: \d+|"
                      r"[^\n]*[Ii]nvalid unicode[^\n]*|Maximum line size[^\n]*)", msg)
        return f"{lines[0]}: {m.group(1).strip() if m else 'malformed row'}"
    return lines[0]


def probe_columns(con: duckdb.DuckDBPyConnection, path: Path, display: str, kind: str) -> dict[str, str]:
    """Column name -> DuckDB type, read from the file's own header/schema."""
    if kind in ("csv", "json"):
        _sniff_text(path, display)
    elif path.stat().st_size == 0:
        raise InputError(display, "file is empty")
    if kind == "csv":
        return {c: "VARCHAR" for c in csv_header(path, display)}
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM {reader_sql(path, kind)}").fetchall()
    except duckdb.Error as e:
        raise InputError(display, f"cannot read as {kind}: {explain_duckdb_error(e)}") from None
    cols = {r[0]: r[1] for r in rows if r[0] != "file_row_number"}
    if not cols:
        raise InputError(display, "file has no columns")
    return cols


def detect(cols: dict[str, str], kind: str, display: str) -> fm.ExportFormat:
    for f in fm.registry():
        lower = {f.normalize_name(k).lower(): v for k, v in reversed(cols.items())}
        if kind in f.file_kinds and f.detect(lower, kind):
            return f
    sample = ", ".join(list(cols)[:8])
    raise UnknownFormatError(
        display,
        f"not a billing export this tool understands (columns: {sample}...). Understood formats:\n"
        + fm.describe_formats(),
    )


@dataclass
class MappedFile:
    path: Path
    display: str
    kind: str
    fmt: fm.ExportFormat
    cols: dict[str, str]  # actual name -> type
    _names: dict[str, list[str]] | None = field(default=None, repr=False)

    def reader(self) -> str:
        return reader_sql(self.path, self.kind, list(self.cols))

    def by_name(self) -> dict[str, str]:
        """Normalised (lower-case) name -> actual column name; the first of duplicates."""
        return {n: actuals[0] for n, actuals in self.all_by_name().items()}

    def all_by_name(self) -> dict[str, list[str]]:
        """Normalised name -> every actual column answering to it (duplicates, case variants).

        Declared names are also found when a header differs only in case and separators
        (``lineitem/unblendedcost`` answers to ``line_item_unblended_cost``).
        """
        if self._names is not None:
            return self._names
        out: dict[str, list[str]] = {}
        squashed: dict[str, list[str]] = {}
        for k in self.cols:
            base = _DUP.sub("", k)
            out.setdefault(self.fmt.normalize_name(base).lower(), []).append(k)
            squashed.setdefault(_squash(base), []).append(k)
        declared = dict(self.fmt.columns)
        declared.update(self.fmt.dynamic_columns({n: self.cols[a[0]] for n, a in out.items()}))
        for name in declared:
            key = name.lower()
            extra = [a for a in squashed.get(_squash(name), []) if a not in out.get(key, [])]
            if extra:
                out[key] = out.get(key, []) + extra
        self._names = out
        return out

    def shown(self, actual: str) -> str:
        return _DUP.sub("", actual)

    def lower_cols(self) -> dict[str, str]:
        by = self.by_name()
        return {n: self.cols[a] for n, a in by.items()}

    def declared(self) -> dict[str, str]:
        d = dict(self.fmt.columns)
        d.update(self.fmt.dynamic_columns(self.lower_cols()))
        return d

    def src_sql(self) -> str:
        by_lower = self.by_name()
        declared = self.declared()
        missing = [n for n in self.fmt.required if n.lower() not in by_lower]
        if missing:
            raise InputError(self.display, f"required column missing for {self.fmt.id}", column=missing[0])
        parts = []
        every = self.all_by_name()
        for name, kind in declared.items():
            actual = by_lower.get(name.lower())
            variants = every.get(name.lower(), [])
            if len(variants) > 1 and kind == fm.NUM:
                raise InputError(self.display, f"the column appears more than once ({', '.join(map(self.shown, variants))}): "
                                 "which one holds the money is ambiguous", column=self.shown(variants[1]))
            if len(variants) > 1 and kind == fm.TEXT:  # case variants of a text column: first non-empty value
                refs = ", ".join(f"nullif(CAST(raw.{ident(v)} AS VARCHAR), '')" for v in variants)
                parts.append(f"coalesce({refs}) AS {ident(name)}")
                continue
            if actual is None:
                null_type = "VARCHAR" if kind != fm.RAW else "VARCHAR"
                if kind == fm.NUM:
                    null_type = schema.MONEY
                elif kind == fm.TIME:
                    null_type = "TIMESTAMP"
                parts.append(f"NULL::{null_type} AS {ident(name)}")
                continue
            ref = "raw." + ident(actual)
            if kind != fm.RAW and self.cols[actual] == "JSON":  # JSON readers type mixed scalars as JSON
                ref = f"json_extract_string({ref}, '$')"
            if kind == fm.NUM:
                typ = self.cols[actual]
                if typ.startswith("DECIMAL"):
                    expr = ref
                elif typ in NUMERIC_TYPES:  # a direct cast: NaN/Inf still fail, and are diagnosed
                    expr = f"CAST({ref} AS {schema.MONEY})"
                else:
                    expr = f"ba_num({ref})"
            elif kind == fm.TIME:
                expr = f"CAST({ref} AS TIMESTAMP)" if self.cols[actual] == "TIMESTAMP" else f"ba_ts({ref})"
            elif kind == fm.TEXT:
                expr = f"CAST({ref} AS VARCHAR)"
            else:
                expr = ref
            parts.append(f"{expr} AS {ident(name)}")
        row = "file_row_number + 1" if self.kind == "parquet" else "row_number() OVER ()"
        parts.append(f"{row} AS _row")
        return f"SELECT {', '.join(parts)} FROM {self.reader()} AS raw"

    def mapped_sql(self, con: duckdb.DuckDBPyConnection, *, fp: str, ingest_id: int) -> str:
        """SELECT producing every canonical column in schema order."""
        body = self.fmt.render(self.lower_cols())
        src = self.src_sql()
        try:
            provided = {r[0] for r in con.execute(f"DESCRIBE WITH src AS ({src}) {body}").fetchall()}
        except duckdb.Error as e:
            raise InputError(self.display, f"cannot map as {self.fmt.id}: {explain_duckdb_error(e)}") from None
        unknown = provided - set(schema.COLUMN_NAMES) - {"_row"}
        if unknown:  # a format bug, not a user error
            raise RuntimeError(f"{self.fmt.id} maps to non-canonical columns {sorted(unknown)}")
        provider = self.fmt.provider
        # A format whose lines come from several providers (generic FOCUS) outputs x_Provider itself.
        prov = lit(provider)
        if "x_Provider" in provided:
            prov = f"coalesce(CAST(m.\"x_Provider\" AS VARCHAR), {prov})"
        fixed = {
            "x_LineItemId": f"{prov} || {lit('-' + fp[:12] + '-')} || CAST(m._row AS VARCHAR)",
            "x_Provider": prov,
            "x_SourceFile": lit(self.display),
            "x_SourceRow": "m._row",
            "x_SourceFormat": lit(self.fmt.id),
            "x_IngestId": str(int(ingest_id)),
        }
        out = []
        for c in schema.COLUMNS:
            if c.name in fixed:
                expr = fixed[c.name]
            elif c.name == "BillingPeriodStart":
                inner = 'm."BillingPeriodStart"' if c.name in provided else "NULL"
                expr = f"coalesce(CAST({inner} AS TIMESTAMP), date_trunc('month', CAST(m.\"ChargePeriodStart\" AS TIMESTAMP)))"
            elif c.name == "BillingPeriodEnd":
                inner = 'm."BillingPeriodEnd"' if c.name in provided else "NULL"
                expr = (
                    f"coalesce(CAST({inner} AS TIMESTAMP), date_trunc('month', CAST(m.\"ChargePeriodStart\" AS TIMESTAMP))"
                    " + INTERVAL 1 MONTH)"
                )
            elif c.name == "Tags":
                expr = "coalesce(m.\"Tags\", MAP {}::MAP(VARCHAR, VARCHAR))" if "Tags" in provided else "MAP {}::MAP(VARCHAR, VARCHAR)"
            elif c.name in provided:
                expr = f"CAST(m.{ident(c.name)} AS {c.type})"
            else:
                expr = f"NULL::{c.type}"
            out.append(f"{expr} AS {ident(c.name)}")
        return f"WITH src AS ({src})\nSELECT {', '.join(out)} FROM ({body}) AS m"


def diagnose(con: duckdb.DuckDBPyConnection, mf: MappedFile, original: Exception) -> InputError:
    """After a failed read: find the first row and column that cannot be parsed."""
    refused = re.search(re.escape(fm.ROW_ERROR) + r"\|(\d+)\|([^|\n]*)\|([^\n]*)", str(original))
    if refused:  # a mapping refused a row (formats.row_error)
        return InputError(mf.display, refused.group(3).strip(), row=int(refused.group(1)), column=refused.group(2))
    by_lower = mf.by_name()
    declared = mf.declared()
    row = "file_row_number + 1" if mf.kind == "parquet" else "row_number() OVER ()"
    for name, kind in declared.items():
        actual = by_lower.get(name.lower())
        if actual is None or kind not in (fm.NUM, fm.TIME):
            continue
        if kind == fm.NUM and mf.cols[actual].startswith("DECIMAL"):
            continue
        if kind == fm.TIME and mf.cols[actual] == "TIMESTAMP":
            continue
        check = "ba_try_num" if kind == fm.NUM else "ba_try_ts"
        ref = "raw." + ident(actual)
        if mf.cols[actual] == "JSON":
            ref = f"json_extract_string({ref}, '$')"
        sql = (
            f"SELECT _row, v FROM (SELECT {row} AS _row, CAST({ref} AS VARCHAR) AS v, {check}({ref}) AS p "
            f"FROM {mf.reader()} AS raw) WHERE v IS NOT NULL AND trim(v) <> '' AND p IS NULL "
            "ORDER BY _row LIMIT 1"
        )
        try:
            hit = con.execute(sql).fetchone()
        except duckdb.Error:
            continue
        if hit:
            what = "a number" if kind == fm.NUM else "a date"
            shown = hit[1] if len(hit[1]) <= 60 else hit[1][:57] + "..."
            return InputError(mf.display, f"cannot read {shown!r} as {what}", row=int(hit[0]), column=mf.shown(actual))
    msg = explain_duckdb_error(original)
    m = re.search(r"CSV Error on Line: (\d+)", msg)
    if "unicode" in msg.lower() or "utf-8" in msg.lower():
        msg = f"not UTF-8 text ({msg}); re-save the file as UTF-8"
    return InputError(mf.display, msg, row=int(m.group(1)) - 1 if m else None)
