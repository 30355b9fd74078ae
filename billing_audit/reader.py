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
import os
import re
import shutil
import stat
import tarfile
import tempfile
import zipfile
import zlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO

import duckdb

from billing_audit import formats as fm
from billing_audit import schema
from billing_audit.errors import InputError, UnknownFormatError
from billing_audit.sql import ident, lit

NUMERIC_TYPES = {"DOUBLE", "FLOAT", "REAL", "BIGINT", "INTEGER", "SMALLINT", "TINYINT", "HUGEINT", "UBIGINT",
                 "UINTEGER", "USMALLINT", "UTINYINT"}
DATA_SUFFIXES = (".parquet", ".csv", ".csv.gz", ".zip", ".json", ".jsonl", ".ndjson", ".json.gz", ".jsonl.gz")

# Cells that mean "no value" in numeric and date columns: empty, and the literals the FOCUS sample
# data and the tools generating FOCUS files write.
NULL_WORDS = ("", "NULL", "null", "Null", "NaN", "nan", "NAN")
# Dates before this, or more than a year after today, are misreadings (a 2-digit year read as 0025).
EARLIEST_DATE = "2000-01-01"
# Every number read (money and quantities) is below this in magnitude: far above any real line, and low enough
# that any sum the tool computes fits DECIMAL(38,12) (at most 1.7e26: the sum of 1.7e11 lines at the bound).
MAX_AMOUNT = 10**15


def _slash_formats(day_first: bool) -> str:
    a, b = ("%d", "%m") if day_first else ("%m", "%d")
    times = ["", " %H:%M", " %H:%M:%S", " %I:%M %p", " %I:%M:%S %p"]
    # %y first: '%Y' reads '25' as the year 25; '%y' refuses '2025' (its last two digits are left over)
    return "[" + ", ".join(f"'{a}/{b}/{y}{t}'" for t in times for y in ("%y", "%Y")) + "]"


MACROS = [
    f"""CREATE OR REPLACE TEMP MACRO ba_isnull(x) AS (
        x IS NULL OR trim(CAST(x AS VARCHAR)) IN ({", ".join(lit(w) for w in NULL_WORDS)}))""",
    # text -> DECIMAL(38,12) through DECIMAL(18,12) where the number fits it (under 10^6, nearly every line): the
    # same value (the excess digits rounded alike), but DuckDB reads a text of more than 18 digits into a 128-bit
    # decimal digit by digit in 128-bit arithmetic: 12.9 s per 10M texts like Azure's unrounded
    # '0.0006429214350006429' against 0.57 s.  A text it does not fit is read as before.
    """CREATE OR REPLACE TEMP MACRO ba_text_num(t) AS (coalesce(TRY_CAST(t AS DECIMAL(18,12)), CAST(t AS DECIMAL(38,12))))""",
    """CREATE OR REPLACE TEMP MACRO ba_try_text_num(t) AS (
        coalesce(TRY_CAST(t AS DECIMAL(18,12)), TRY_CAST(t AS DECIMAL(38,12))))""",
    # text -> DECIMAL; NULL words -> NULL; anything unreadable raises (diagnosed afterwards)
    """CREATE OR REPLACE TEMP MACRO ba_num(x) AS (
        CASE WHEN ba_isnull(x) THEN NULL ELSE ba_text_num(trim(CAST(x AS VARCHAR))) END)""",
    """CREATE OR REPLACE TEMP MACRO ba_try_num(x) AS (
        CASE WHEN ba_isnull(x) THEN NULL ELSE ba_try_text_num(trim(CAST(x AS VARCHAR))) END)""",
    # decimal comma (European-locale downloads): '1,5', '1.234,56', '-0,25', '1,2E-5'; a '.' is a thousands mark
    """CREATE OR REPLACE TEMP MACRO ba_dc_ok(t) AS (
        regexp_full_match(t, '[+-]?([0-9]{1,3}([.][0-9]{3})+|[0-9]*)(,[0-9]+)?([eE][+-]?[0-9]+)?'))""",
    """CREATE OR REPLACE TEMP MACRO ba_try_num_dc(x) AS (
        CASE WHEN ba_isnull(x) THEN NULL WHEN ba_dc_ok(trim(CAST(x AS VARCHAR)))
             THEN ba_try_text_num(replace(replace(trim(CAST(x AS VARCHAR)), '.', ''), ',', '.')) END)""",
    """CREATE OR REPLACE TEMP MACRO ba_num_dc(x) AS (
        CASE WHEN ba_isnull(x) THEN NULL
             ELSE coalesce(ba_try_num_dc(x), error('cannot read ' || CAST(x AS VARCHAR) || ' as a number')) END)""",
    # a number of implausible size (its sums would overflow DECIMAL(38,12)) raises (diagnosed afterwards)
    f"""CREATE OR REPLACE TEMP MACRO ba_bound(x) AS (
        CASE WHEN abs(x) >= CAST({MAX_AMOUNT} AS DECIMAL(38,12)) THEN error('amount out of range') ELSE x END)""",
    # a value a required column must have (money, mostly): NULL raises (diagnosed afterwards)
    """CREATE OR REPLACE TEMP MACRO ba_required(x) AS (coalesce(x, error('a required value is missing')))""",
    # text -> TIMESTAMP (UTC): ISO (with or without T, Z, seconds, fractions, offsets, ' UTC'), and
    # M/D/YYYY, M/D/YY with or without a 24-hour or AM/PM time; day_first reads D/M (decided per file)
    f"""CREATE OR REPLACE TEMP MACRO ba_try_ts(x, day_first := false) AS (
        CASE WHEN ba_isnull(x) THEN NULL
             WHEN contains(CAST(x AS VARCHAR), '/') THEN CASE WHEN day_first
                  THEN try_strptime(trim(CAST(x AS VARCHAR)), {_slash_formats(True)})
                  ELSE try_strptime(trim(CAST(x AS VARCHAR)), {_slash_formats(False)}) END
             ELSE CAST(TRY_CAST(trim(CAST(x AS VARCHAR)) AS TIMESTAMPTZ) AS TIMESTAMP) END)""",
    f"""CREATE OR REPLACE TEMP MACRO ba_in_window(t) AS (
        t IS NULL OR (t >= TIMESTAMP '{EARLIEST_DATE}' AND t <= current_date + INTERVAL 1 YEAR))""",
    """CREATE OR REPLACE TEMP MACRO ba_window(t) AS (
        CASE WHEN ba_in_window(t) THEN t ELSE error('date ' || CAST(t AS VARCHAR) || ' is implausible') END)""",
    """CREATE OR REPLACE TEMP MACRO ba_ts(x, day_first := false) AS (
        CASE WHEN ba_isnull(x) THEN NULL
             ELSE ba_window(coalesce(ba_try_ts(x, day_first := day_first),
                                     error('cannot read date ' || CAST(x AS VARCHAR)))) END)""",
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
      map_from_entries(list_transform(list_filter(entries, lambda e: e.v IS NOT NULL AND ba_ws(e.v) <> ''),
                                      lambda e: {'key': e.k, 'value': ba_ws(e.v)})))""",
    # JSON object text (with or without outer braces) -> list of {k, v}; NULL when malformed
    """CREATE OR REPLACE TEMP MACRO ba_json_obj(s) AS (
        CASE WHEN s IS NULL OR ba_ws(s) IN ('', '{}', 'NULL', 'null', 'Null') THEN NULL
             WHEN starts_with(ba_ws(s), '{') THEN (CASE WHEN json_valid(ba_ws(s)) AND json_type(ba_ws(s)) = 'OBJECT' THEN ba_ws(s) END)
             ELSE (CASE WHEN json_valid('{' || ba_ws(s) || '}') THEN '{' || ba_ws(s) || '}' END) END)""",
    """CREATE OR REPLACE TEMP MACRO ba_json_tags(s) AS (
        list_transform(map_entries(json_transform(ba_json_obj(s), '"MAP(VARCHAR, VARCHAR)"')),
                       lambda e: {'k': e.key, 'v': e.value}))""",
    """CREATE OR REPLACE TEMP MACRO ba_tags_malformed(s) AS (
        s IS NOT NULL AND ba_ws(s) NOT IN ('', '{}', 'NULL', 'null', 'Null') AND ba_json_obj(s) IS NULL)""",
]


def install_macros(con: duckdb.DuckDBPyConnection) -> None:
    for m in MACROS:
        con.execute(m)


@contextmanager
def side_connection(con: duckdb.DuckDBPyConnection) -> Iterator[duckdb.DuckDBPyConnection]:
    """A cursor outside ``con``'s transaction, with the macros: a query failing there leaves that transaction usable."""
    side = con.cursor()
    try:
        side.execute("SET TimeZone = 'UTC'")
        install_macros(side)
        yield side
    finally:
        side.close()


def fingerprint(path: Path) -> str:
    """sha256 of the file's bytes, read in 8 MiB pieces into one buffer (the GIL is taken back once per piece:
    with 1 MiB pieces, a thread parsing Python alongside made the hashing of 86 MiB take 0.3 s, not 0.1 s)."""
    h = hashlib.sha256()
    buf = bytearray(1 << 23)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            h.update(view[:n])
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


SNIFF_BYTES = 1 << 20  # quirks are detected from the file's first MB (and, for plain files, its last bytes)
REWRITE_CHUNK = 8 << 20
TEMP_RESERVE = 256 << 20  # a rewrite stops before the temp folder has less than this left


def _open_bytes(path: Path) -> gzip.GzipFile | io.BufferedReader:
    return gzip.open(path, "rb") if path.name.lower().endswith(".gz") else open(path, "rb")  # noqa: SIM115


def read_head(path: Path, size: int = SNIFF_BYTES) -> bytes:
    """The first ``size`` bytes of a file (decompressed for .gz)."""
    with _open_bytes(path) as f:
        return f.read(size)


def _line_endings(data: bytes) -> set[str]:
    """The record terminators (CRLF, LF, CR) outside quoted fields."""
    kinds: set[str] = set()
    for seg in data.split(b'"')[::2]:  # outside quotes ("" escapes split into an empty inside part: parity holds)
        if b"\r\n" in seg:
            kinds.add("CRLF")
        rest = seg.replace(b"\r\n", b"")
        if b"\n" in rest:
            kinds.add("LF")
        if b"\r" in rest:
            kinds.add("CR")
    return kinds


def needs_line_ending_rewrite(path: Path) -> str | None:
    """Why DuckDB cannot read this CSV as it is (record terminators of more than one kind), or None.

    A CR, LF or CRLF inside a quoted value is data, and DuckDB reads it in LF, CRLF and CR files alike.
    """
    head = read_head(path)
    if len(head) == SNIFF_BYTES and head.endswith(b"\r"):
        head = head[:-1]  # a CRLF cut at the sample's end
    kinds = _line_endings(head)
    if not path.name.lower().endswith(".gz") and path.stat().st_size > len(head):
        with open(path, "rb") as f:  # the last row's terminator, which real exports get wrong
            f.seek(-2, 2)
            end = f.read(2)
        kinds.add("CRLF" if end == b"\r\n" else "LF" if end.endswith(b"\n") else "CR" if end.endswith(b"\r") else "")
        kinds.discard("")
    if len(kinds) > 1:
        return "mixed line endings (" + ", ".join(sorted(kinds)) + ")"
    return None


def _to_crlf(seg: bytes) -> bytes:
    if b"\r" not in seg and b"\n" not in seg:
        return seg
    return seg.replace(b"\r\n", b"\n").replace(b"\r", b"\n").replace(b"\n", b"\r\n")


def rewrite_line_endings(src: Path, dst: Path, display: str) -> None:
    """Stream ``src`` into ``dst`` with every record terminator (CRLF, LF or CR outside quotes) made CRLF.

    Quoted values are copied byte for byte (a CR, LF or CRLF in them stays part of the value): DuckDB reads
    CRLF files with any of them inside quotes.  Stops (InputError) before the temp folder runs out of space.
    """
    in_quote = False
    carry = b""
    with _open_bytes(src) as f, open(dst, "wb") as out:
        while True:
            chunk = f.read(REWRITE_CHUNK)
            data = carry + chunk
            carry = b""
            if chunk and data.endswith(b"\r"):  # its LF may start the next chunk
                carry, data = b"\r", data[:-1]
            if data:
                if shutil.disk_usage(dst.parent).free < TEMP_RESERVE + 2 * len(data):
                    raise InputError(display, f"not enough free space in {dst.parent} to normalise the file's line "
                                              "endings (set TMPDIR to a larger folder)")
                segs = data.split(b'"')
                start = 1 if in_quote else 0
                segs[start::2] = [_to_crlf(s) for s in segs[start::2]]
                in_quote = in_quote != (len(segs) % 2 == 0)
                out.write(b'"'.join(segs))
            if not chunk:
                break


def _quirk_free(local: Path, display: str, tmp: Callable[[], Path], force: bool) -> Path:
    """The CSV itself, or a normalised copy in ``tmp()`` when its line endings would stop DuckDB."""
    if file_kind(local) != "csv":
        return local
    try:
        why = needs_line_ending_rewrite(local) if not force else "forced"
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(display, f"cannot read file ({e})") from None
    if why is None:
        return local
    name = local.name[:-3] if local.name.lower().endswith(".gz") else local.name
    target = tmp() / f"crlf-{len(list(tmp().iterdir())):04d}-{name}"
    try:
        rewrite_line_endings(local, target, display)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(display, f"cannot read file ({e})") from None
    return target


GIB = 1 << 30
DEFAULT_MAX_UNPACK = 20 * GIB  # what one archive may expand to ($BILLING_AUDIT_MAX_UNPACK, bytes or 20GiB / 500MB)
MAX_RATIO = 200  # a member expanding more than this many times its packed size is refused ...
RATIO_FREE = 64 << 20  # ... unless it is smaller than this
TAR_SUFFIXES = (".tar", ".tar.gz", ".tgz")
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "kib": 1 << 10, "m": 1 << 20, "mb": 1 << 20, "mib": 1 << 20,
          "g": GIB, "gb": GIB, "gib": GIB, "t": 1 << 40, "tb": 1 << 40, "tib": 1 << 40}


def max_unpack() -> int:
    """The most bytes one archive may expand to: $BILLING_AUDIT_MAX_UNPACK (``20GiB``, ``500MB``, bytes)."""
    raw = os.environ.get("BILLING_AUDIT_MAX_UNPACK", "").strip().lower()
    if not raw:
        return DEFAULT_MAX_UNPACK
    m = re.fullmatch(r"([0-9.]+)\s*([a-z]*)", raw)
    if not m or m.group(2) not in _UNITS:
        raise InputError("BILLING_AUDIT_MAX_UNPACK", f"cannot read {raw!r} as a size (e.g. 20GiB, 500MB, 1000000)")
    return int(float(m.group(1)) * _UNITS[m.group(2)])


def _size(n: int) -> str:
    return f"{n / GIB:,.2f} GiB" if n >= GIB else f"{n / (1 << 20):,.1f} MiB"


def check_unpack(archive: str, members: list[tuple[str, int, int]], dest: Path) -> None:
    """Refuse an archive before unpacking it: its members ((name, size, packed size)) expand to more than
    $BILLING_AUDIT_MAX_UNPACK in all, one of them more than ``MAX_RATIO`` times its packed size (above
    ``RATIO_FREE``), or ``dest`` has not the room for them (plus ``TEMP_RESERVE``)."""
    limit = max_unpack()
    total = 0
    for name, size, packed in members:
        if size > RATIO_FREE and size > MAX_RATIO * max(packed, 1):
            raise InputError(f"{archive}!{name}", f"the member expands {size / max(packed, 1):,.0f} times its packed "
                             f"size ({_size(packed)} to {_size(size)}; at most {MAX_RATIO}:1 above {_size(RATIO_FREE)}): "
                             "refused as a possible zip bomb")
        total += size
        if total > limit:
            raise InputError(f"{archive}!{name}", f"the archive expands to more than {_size(limit)} (at this member: "
                             f"{_size(total)}); raise BILLING_AUDIT_MAX_UNPACK to read it")
    free = shutil.disk_usage(dest).free
    if total + TEMP_RESERVE > free:
        raise InputError(archive, f"unpacking needs {_size(total)} but the temporary folder {dest} has {_size(free)} "
                         "free (set TMPDIR to a larger folder)")


def _copy_member(src: IO[bytes], target: Path, display: str,
                 limit: int) -> None:
    """Copy one member out, stopping past ``limit`` bytes; a full disk names the member and the folder."""
    written = 0
    try:
        with open(target, "wb") as dst:
            while chunk := src.read(1 << 20):
                written += len(chunk)
                if written > limit:
                    raise InputError(display, f"the member holds more than the {_size(limit)} its archive declares")
                dst.write(chunk)
    except OSError as e:
        raise InputError(display, f"cannot unpack into {target.parent}: {e.strerror or e} (set TMPDIR to a folder "
                         "with more room)") from None


# Files unpacked from a tarball: local path -> how they are shown (``archive.tar.gz!member/path``).
_DISPLAY: dict[str, str] = {}


def display_name(path: Path) -> str:
    """How a file is named in x_SourceFile and errors: its path, ``archive!member`` for a tarball member, or the
    URI of a file staged from a lake (:func:`show_as`)."""
    return _DISPLAY.get(str(path), str(path))


def show_as(path: Path, display: str) -> None:
    """Name the local copy ``path`` as ``display`` (a staged lake file by its URI) until :func:`forget_display`."""
    _DISPLAY[str(path)] = display


def forget_display(path: str) -> None:
    _DISPLAY.pop(path, None)


_URI = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]+://")


def is_uri(text: str) -> bool:
    """``s3a://bucket/key``, ``abfss://...``, ``file:///path``: a location a file system names, not a local path."""
    return bool(_URI.match(text))


def is_tarball(path: Path) -> bool:
    return path.name.lower().endswith(TAR_SUFFIXES)


@contextmanager
def unpacked_tar(path: Path) -> Iterator[Path]:
    """Unpack a tarball into a temporary folder (removed on exit); its files are shown as ``path!member``.

    Refused, naming the member: an absolute name, a ``..`` part, a link or device, and the bounds of
    :func:`check_unpack` (the ratio is the whole archive's: a tarball compresses as one stream)."""
    try:
        tf = tarfile.open(path)  # noqa: SIM115
    except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
        raise InputError(str(path), f"not a readable tar archive ({e})") from None
    dest = Path(tempfile.mkdtemp(prefix="ba-tar-"))
    shown: list[str] = []
    try:
        with tf:
            try:
                members = tf.getmembers()
            except (tarfile.TarError, OSError, EOFError, zlib.error) as e:
                raise InputError(str(path), f"not a readable tar archive ({e})") from None
            files = []
            for m in members:
                name = m.name
                if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
                    raise InputError(f"{path}!{name}", "the member has an absolute path: the archive is refused")
                if ".." in re.split(r"[/\\]", name):
                    raise InputError(f"{path}!{name}", "the member's path leaves the archive (..): the archive is refused")
                if m.issym() or m.islnk():
                    raise InputError(f"{path}!{name}", f"the member is a link (to {m.linkname!r}): the archive is refused")
                if not (m.isfile() or m.isdir()):
                    raise InputError(f"{path}!{name}", "the member is not a file or folder: the archive is refused")
                if m.isfile():
                    files.append(m)
            total = sum(m.size for m in files)
            packed = path.stat().st_size
            if total > RATIO_FREE and total > MAX_RATIO * max(packed, 1):
                raise InputError(str(path), f"the archive expands {total / max(packed, 1):,.0f} times its size "
                                 f"({_size(packed)} to {_size(total)}; at most {MAX_RATIO}:1 above {_size(RATIO_FREE)}): "
                                 "refused as a possible archive bomb")
            check_unpack(str(path), [(m.name, m.size, m.size) for m in files], dest)
            for m in files:
                parts = [p for p in re.split(r"[/\\]", m.name) if p not in ("", ".")]
                target = dest.joinpath(*parts)
                display = f"{display_name(path)}!{'/'.join(parts)}"
                target.parent.mkdir(parents=True, exist_ok=True)
                src = tf.extractfile(m)
                if src is None:
                    continue
                try:
                    with src:
                        _copy_member(src, target, display, m.size)
                except (tarfile.TarError, EOFError, zlib.error) as e:
                    raise InputError(display, f"cannot unpack the tar member ({e})") from None
                os.utime(target, (m.mtime, m.mtime))
                target.chmod(stat.S_IRUSR | stat.S_IWUSR)
                _DISPLAY[str(target)] = display
                shown.append(str(target))
        yield dest
    finally:
        for k in shown:
            _DISPLAY.pop(k, None)
        shutil.rmtree(dest, ignore_errors=True)


@contextmanager
def readable(path: Path, *, rewrite: bool = False) -> Iterator[list[tuple[Path, str]]]:
    """Yield (local path, display name) pairs DuckDB can read.

    Unpacks .zip members; a CSV whose line endings DuckDB cannot read (mixed CRLF/LF/CR; ``rewrite``
    forces it) is read from a normalised temporary copy.  Every temporary file is removed on exit.
    """
    tmp_dir: list[Path] = []

    def tmp() -> Path:
        if not tmp_dir:
            tmp_dir.append(Path(tempfile.mkdtemp(prefix="ba-read-")))
        return tmp_dir[0]

    try:
        if not path.name.lower().endswith(".zip"):
            yield [(_quirk_free(path, display_name(path), tmp, rewrite), display_name(path))]
            return
        try:
            zf = zipfile.ZipFile(path)
        except (zipfile.BadZipFile, OSError) as e:
            raise InputError(display_name(path), f"not a readable zip archive ({e})") from None
        out: list[tuple[Path, str]] = []
        shown = display_name(path)
        with zf:
            wanted = [i for i in zf.infolist() if not i.is_dir() and is_data_file(Path(i.filename))]
            check_unpack(shown, [(i.filename, i.file_size, i.compress_size) for i in wanted], tmp())
            for info in wanted:
                target = tmp() / f"{len(out):04d}-{Path(info.filename).name}"
                display = f"{shown}!{info.filename}"
                try:
                    with zf.open(info) as src:
                        _copy_member(src, target, display, info.file_size)
                except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as e:
                    raise InputError(display, f"cannot unpack the zip member ({e})") from None
                out.append((_quirk_free(target, display, tmp, rewrite), display))
        if not out:
            raise InputError(display_name(path), "zip archive holds no CSV or parquet file")
        yield out
    finally:
        if tmp_dir:
            shutil.rmtree(tmp_dir[0], ignore_errors=True)


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


MAX_LINE = 64 << 20  # the longest CSV record read
BUFFER = 128 << 20  # DuckDB's CSV buffer: twice the longest record
# The tag memo (MappedFile.tag_memo): a temp table of the file's distinct tag inputs with their maps, read by a join
TAG_MEMO = "ba_tag_memo"
TAG_MEMO_MAX_INPUTS = 256  # more tag columns: the map is built per line (the wide path, WIDE_TAG_COLUMNS in aws/cur)
TAG_MEMO_MIN = 10_000  # a memo this small is always kept, however few lines share each input
# Whether the memo's rewritten mapping binds as the mapping does, by what decides it (the format, its tag
# expression, the file's kind and typed columns, how its text is read): a delivery's parts share it, checked once.
_MEMO_BINDS: dict[tuple[object, ...], bool] = {}
WIDE_COLUMNS = 1000  # a file with more columns is wide (thousands of tag columns): read on one thread, and ...
# ... in small buffers, which also end DuckDB's chunks early: a chunk holds the rows of a buffer, so its vectors
# (one per column) hold fewer rows the wider the file.  4 MB holds ~300 rows of 10,000 columns (~13 KB a row), so
# a file of 1,000 rows already spans several buffers and its peak is the steady one of any longer file: 10,000
# tag columns peak at ~550-600 MB at 1,000 and at 16,000 rows (16 MB buffers: ~710 MB at 1,000, ~850 at 16,000),
# for ~1.4x the CPU time (each chunk's fixed cost per column is paid more often).  A record stays far below
# 2 MB: AWS allows 50 user tags of at most 256 characters on a resource.
WIDE_MAX_LINE = 2 << 20
WIDE_BUFFER = 4 << 20


def reader_sql(path: Path, kind: str, columns: list[str] | None = None, delimiter: str = ",") -> str:
    p = lit(str(path))
    if kind == "parquet":
        return f"read_parquet({p}, file_row_number=true)"
    if kind == "json":
        # sample the whole file: a key first seen late in a big export must not be dropped
        return f"read_json({p}, format='auto', maximum_object_size=67108864, sample_size=-1)"
    assert columns is not None, "CSV is read with the header's own column names"
    spec = ", ".join(f"{lit(c)}: 'VARCHAR'" for c in columns)
    line, buffer = (WIDE_MAX_LINE, WIDE_BUFFER) if len(columns) > WIDE_COLUMNS else (MAX_LINE, BUFFER)
    return (
        f"read_csv({p}, header=true, auto_detect=false, columns={{{spec}}}, delim={lit(delimiter)}, quote='\"', escape='\"', "
        f"strict_mode=true, null_padding=false, max_line_size={line}, buffer_size={buffer})"
    )


DUP_MARK = "#dup"
_COMMA_NUMBER = re.compile(r"[+-]?([0-9]{1,3}([.][0-9]{3})+|[0-9]*),[0-9]+([eE][+-]?[0-9]+)?")
_POINT_NUMBER = re.compile(r"[+-]?[0-9]*[.][0-9]+([eE][+-]?[0-9]+)?")
_THOUSANDS = re.compile(r"[+-]?[0-9]{1,3}([.][0-9]{3})+")  # 1.234: a thousands mark or a decimal point
_DUP = re.compile(re.escape(DUP_MARK) + r"\d+$")


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


DELIMITERS = (",", ";", "\t")
DELIMITER_NAMES = {",": "comma", ";": "semicolon", "\t": "tab"}


def _first_record(text: str, delimiter: str) -> list[str]:
    try:
        return next(csv.reader(io.StringIO(text, newline=""), delimiter=delimiter), [])
    except csv.Error:
        return []


def sniff_delimiter(text: str) -> str:
    """The delimiter (comma, semicolon or tab) that splits the header into the most fields; comma on a tie."""
    best, most = ",", len(_first_record(text, ","))
    for d in DELIMITERS[1:]:
        n = len(_first_record(text, d))
        if n > most:
            best, most = d, n
    return best


def head_text(path: Path) -> str:
    return read_head(path).decode("utf-8-sig", errors="replace")


def csv_header(path: Path, display: str) -> list[str]:
    """The first record of a CSV file (BOM removed); duplicate names get a numeric suffix."""
    text = head_text(path)
    first = _first_record(text, sniff_delimiter(text))
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


def sample_records(text: str, delimiter: str, complete: bool) -> Iterator[list[str]]:
    """The data records of a file's first MB (``complete``: the sample is the whole file, so keep the last)."""
    reader = csv.reader(io.StringIO(text, newline=""), delimiter=delimiter)
    prev: list[str] | None = None
    try:
        next(reader, None)
        for rec in reader:
            if prev is not None:
                yield prev
            prev = rec
    except csv.Error:  # a field beyond the csv module's limit, a NUL: the sample ends there
        return
    if prev is not None and complete:
        yield prev


def explain_duckdb_error(e: Exception) -> str:
    msg = str(e).strip()
    msg = re.sub(r"^[A-Za-z ]+Error: ", "", msg)
    lines = [ln.strip() for ln in msg.splitlines() if ln.strip()]
    if not lines:
        return type(e).__name__
    if lines[0].startswith("CSV Error on Line"):
        m = re.search(r"(Value with unterminated quote found|Expected Number of Columns: \d+ Found: \d+|"
                      r"[^\n]*[Ii]nvalid unicode[^\n]*|Maximum line size[^\n]*)", msg)
        what = m.group(1).strip() if m else "malformed row"
        counts = re.fullmatch(r"Expected Number of Columns: (\d+) Found: (\d+)", what)
        if counts:
            what += f" (the header has {counts.group(1)} columns, this row {counts.group(2)} fields)"
        return f"{lines[0]}: {what}"
    return lines[0]


def probe_columns(con: duckdb.DuckDBPyConnection, path: Path, display: str, kind: str) -> dict[str, str]:
    """Column name -> DuckDB type, read from the file's own header/schema."""
    if kind in ("csv", "json"):
        _sniff_text(path, display)
    elif path.stat().st_size == 0:
        raise InputError(display, "file is empty")
    if kind == "csv":
        try:
            return {c: "VARCHAR" for c in csv_header(path, display)}
        except (OSError, EOFError, zlib.error) as e:
            raise InputError(display, f"cannot read file ({e})") from None
    try:
        rows = con.execute(f"DESCRIBE SELECT * FROM {reader_sql(path, kind)}").fetchall()
    except duckdb.Error as e:
        raise InputError(display, f"cannot read as {kind}: {explain_duckdb_error(e)}") from None
    cols = {r[0]: r[1] for r in rows if r[0] != "file_row_number"}
    if not cols:
        raise InputError(display, "file has no columns")
    return cols


def detect(cols: dict[str, str], kind: str, display: str) -> fm.ExportFormat:
    candidates = []
    for f in fm.registry():
        lower = {f.normalize_name(k).lower(): v for k, v in reversed(cols.items())}
        if kind in f.file_kinds and f.detect(lower, kind):
            return f
        if kind in f.file_kinds:
            candidates.append((f.resemblance(lower), f, lower))
    why = why_unknown(cols, kind, candidates)
    if kind == "json":  # a JSON may also be an event log: say it is neither
        from billing_audit.events import sources

        why += ("; nor an interruption event file (" + ", ".join(s.title for s in sources())
                + ": README \"Interruption events\")")
    raise UnknownFormatError(display, why)


def why_unknown(cols: dict[str, str], kind: str,
                candidates: list[tuple[tuple[int, int], fm.ExportFormat, dict[str, str]]]) -> str:
    """The reason a file is no known format: what it looks like, what it most resembles and what that lacks."""
    hint = "`billing-audit ingest --help` lists the formats"
    names = [_DUP.sub("", c) for c in cols]
    if kind == "csv" and len(names) == 1:
        count, mark = sorted((names[0].count(d), d) for d in "|;\t:^~")[-1]
        if count:
            return (f"the header is a single column ({names[0][:60]!r}): the file looks delimited by {mark!r}; "
                    f"billing-audit reads comma-, semicolon- or tab-delimited CSV")
    sample = ", ".join(names[:8]) + (", ..." if len(names) > 8 else "")
    # most matching columns; on a tie the most generic format (the last in detection order)
    best = None
    for score, f, lower in candidates:
        if best is None or score >= best[0]:
            best = (score, f, lower)
    if best is None or best[0][1] == 0:
        known = ", ".join(f.id for f in fm.registry())
        return f"not a billing export this tool understands: no column of a known format (columns: {sample}; formats: {known})"
    (_, found), f, lower = best
    missing = f.missing_required(lower)
    lacks = (f"lacks the required column{'s' if len(missing) > 1 else ''} {', '.join(missing)}" if missing
             else "lacks the columns that identify it")
    return (f"not a billing export this tool understands: it most resembles {f.id} ({found} of its columns found) "
            f"but {lacks} (columns: {sample}); {hint}")


@dataclass
class MappedFile:
    path: Path
    display: str
    kind: str
    fmt: fm.ExportFormat
    cols: dict[str, str]  # actual name -> type
    _names: dict[str, list[str]] | None = field(default=None, repr=False)
    delimiter: str = ","  # CSV: sniffed from the header
    decimal_comma: bool = False  # CSV: numbers written 1,5 / 1.234,56 (sniffed from the first MB)
    day_first: bool = False  # slash dates read D/M (decided from whole columns by mapped_sql)
    written: list[str] = field(default_factory=list)  # the columns mapped_sql gives values (not NULL for every line)
    memo: tuple[str, str] | None = None  # mapped_sql(memo=True): (the tag memo's CREATE, the mapping that reads it)

    def __post_init__(self) -> None:
        if self.kind != "csv":
            return
        head = read_head(self.path)
        text = head.decode("utf-8-sig", errors="replace")
        self.delimiter = sniff_delimiter(text)
        if self.delimiter != ",":
            self.decimal_comma = self._sniff_decimal_comma(text, complete=len(head) < SNIFF_BYTES)

    def reader(self) -> str:
        return reader_sql(self.path, self.kind, list(self.cols), self.delimiter)

    def _positions(self, kind: str) -> list[tuple[int, str]]:
        """(index in the header, actual name) of the columns declared with this kind."""
        index = {a: i for i, a in enumerate(self.cols)}
        every = self.all_by_name()
        return [(index[a], a) for name, k in self.declared().items() if k == kind for a in every.get(name.lower(), [])]

    def _sniff_decimal_comma(self, text: str, complete: bool) -> bool:
        """True when the numbers in the sample use a decimal comma; refuses a sample that mixes both marks."""
        cols = self._positions(fm.NUM)
        comma = point = None
        for r, rec in enumerate(sample_records(text, self.delimiter, complete), start=1):
            for i, actual in cols:
                v = rec[i].strip() if i < len(rec) else ""
                if comma is None and _COMMA_NUMBER.fullmatch(v):
                    comma = (v, r, actual)
                elif point is None and _POINT_NUMBER.fullmatch(v) and not _THOUSANDS.fullmatch(v):
                    point = (v, r, actual)
            if comma and point:
                sep = DELIMITER_NAMES[self.delimiter]
                raise InputError(
                    self.display,
                    f"{sep}-delimited file whose numbers mix a decimal comma ({comma[0]!r} on row {comma[1]}, column "
                    f"{self.shown(comma[2])!r}) and a decimal point ({point[0]!r} on row {point[1]}, column "
                    f"{self.shown(point[2])!r}); re-export it with one decimal mark")
        return comma is not None

    def decide_day_first(self, con: duckdb.DuckDBPyConnection) -> None:
        """Read ambiguous slash dates (1/2/2026) the way the whole file's unambiguous ones say.

        A value whose first part is over 12 makes the file D/M, one whose second part is over 12 M/D; both refuse,
        naming the two rows.  Only files whose sample holds slash dates pay for the scan of their date columns.
        """
        cols = [a for _, a in self._positions(fm.TIME) if self.cols[a] not in ("TIMESTAMP", "TIMESTAMP WITH TIME ZONE")]
        if not cols:
            return
        if self.kind == "csv":
            head = read_head(self.path)
            index = {a: i for i, a in enumerate(self.cols)}
            recs = sample_records(head.decode("utf-8-sig", errors="replace"), self.delimiter, len(head) < SNIFF_BYTES)
            slash = any("/" in rec[index[a]] for rec in recs for a in cols if index[a] < len(rec))
        else:
            probe = " OR ".join(f"contains(CAST(raw.{ident(a)} AS VARCHAR), '/')" for a in cols)
            try:
                with side_connection(con) as side:
                    slash = bool(side.execute(f"SELECT count(*) FROM (SELECT * FROM {self.reader()} AS raw LIMIT 1000) "
                                              f"AS raw WHERE {probe}").fetchone()[0])  # type: ignore[index]
            except duckdb.Error:
                return
        if not slash:
            return
        parts = []
        for a in cols:
            v = f"trim(CAST(raw.{ident(a)} AS VARCHAR))"
            first, second = (f"TRY_CAST(regexp_extract({v}, '^([0-9]{{1,2}})/([0-9]{{1,2}})/', {n}) AS INTEGER)" for n in (1, 2))
            for part in (f"{first} > 12 AND {second} <= 12", f"{second} > 12 AND {first} <= 12"):  # 31/31: no evidence
                parts.append(f"min(_row) FILTER (WHERE {part}), arg_min({v}, _row) FILTER (WHERE {part})")
        row = "file_row_number + 1" if self.kind == "parquet" else "row_number() OVER ()"
        try:
            with side_connection(con) as side:
                got = side.execute(f"SELECT {', '.join(parts)} FROM (SELECT *, {row} AS _row FROM {self.reader()} AS raw) "
                                   "AS raw").fetchone()
        except duckdb.Error:  # an unreadable file: the read that follows reports it
            return
        assert got is not None
        day: tuple[int, str, str] | None = None
        month: tuple[int, str, str] | None = None
        for k, a in enumerate(cols):
            r1, v1, r2, v2 = got[4 * k: 4 * k + 4]
            if r1 is not None and (day is None or r1 < day[0]):
                day = (int(r1), str(v1), a)
            if r2 is not None and (month is None or r2 < month[0]):
                month = (int(r2), str(v2), a)
        if day and month:
            raise InputError(
                self.display,
                f"dates in both day/month orders: {day[1]!r} (row {day[0]}, column {self.shown(day[2])!r}) is day first, "
                f"{month[1]!r} (row {month[0]}, column {self.shown(month[2])!r}) month first; re-export with one date format")
        self.day_first = day is not None

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
        required = {n.lower() for n in self.fmt.required}
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
                    expr = f"{'ba_num_dc' if self.decimal_comma else 'ba_num'}({ref})"
                expr = f"ba_bound({expr})"
                if name.lower() in required:  # a money column the format needs: no value is an error
                    expr = f"ba_required({expr})"
            elif kind == fm.TIME:
                if self.cols[actual] == "TIMESTAMP":
                    expr = f"ba_window(CAST({ref} AS TIMESTAMP))"
                else:
                    expr = f"ba_ts({ref}{', day_first := true' if self.day_first else ''})"
            elif kind == fm.TEXT:
                expr = f"CAST({ref} AS VARCHAR)"
            else:
                expr = ref
            parts.append(f"{expr} AS {ident(name)}")
        row = "file_row_number + 1" if self.kind == "parquet" else "row_number() OVER ()"
        parts.append(f"{row} AS _row")
        return f"SELECT {', '.join(parts)} FROM {self.reader()} AS raw"

    def mapped_sql(self, con: duckdb.DuckDBPyConnection, *, fp: str, ingest_id: int, memo: bool = False) -> str:
        """SELECT producing every canonical column in schema order.  ``self.written`` names those the format
        provides and those every line has (the rest are NULL for every line: the store's table need not hold
        them, :data:`billing_audit.ddl.LINES_TABLE`).  ``memo``: also plan the tag memo (``self.memo``; see
        :meth:`tag_memo`), for a caller that runs the mapping on ``con`` itself (not for Spark)."""
        body = self.fmt.render(self.lower_cols())
        self.decide_day_first(con)
        src = self.src_sql()
        try:
            described = con.execute(f"DESCRIBE WITH src AS ({src}) {body}").fetchall()
        except duckdb.Error as e:
            raise InputError(self.display, f"cannot map as {self.fmt.id}: {explain_duckdb_error(e)}") from None
        provided = {r[0] for r in described}
        self.memo = None
        if memo:
            planned = self._plan_memo(con, src, body, [(r[0], r[1]) for r in described])
            if planned is not None:
                create, src_m, body_m = planned
                self.memo = (create, self._wrap(f"WITH src AS ({src_m})\n", body_m, provided, fp, ingest_id))
        return self._wrap(f"WITH src AS ({src})\n", body, provided, fp, ingest_id)

    def _plan_memo(self, con: duckdb.DuckDBPyConnection, src: str, body: str,
                   described: list[tuple[str, str]]) -> tuple[str, str, str] | None:
        """(CREATE of the tag memo, ``src`` joined to it, ``body`` reading the memo's map) when the format says its
        Tags expression and the few ``src`` columns it reads (:meth:`billing_audit.formats.ExportFormat.tag_inputs`)
        and the rewritten mapping binds to exactly the same columns and types (checked on a side connection, so a
        surprise cannot abort the caller's transaction); else None, and every line builds its own map."""
        got = self.fmt.tag_inputs(self.lower_cols())
        if got is None:
            return None
        expr, inputs = got
        if not inputs or len(inputs) > TAG_MEMO_MAX_INPUTS or body.count(expr) != 1:
            return None
        cols = ", ".join(ident(c) for c in inputs)
        on = " AND ".join(f"src.{ident(c)} IS NOT DISTINCT FROM ba_tm.{ident(c)}" for c in inputs)
        body_m = body.replace(expr, "ba_tm_tags")

        def joined(memo: str) -> str:
            return f"SELECT src.*, ba_tm.ba_tm_tags FROM ({src}) AS src LEFT JOIN {memo} AS ba_tm ON {on}"

        key = (self.fmt.id, expr, self.kind, tuple(self.cols.items()), self.day_first, self.decimal_comma,
               self.delimiter)
        if key not in _MEMO_BINDS:
            shape = f"(SELECT {cols}, {expr} AS ba_tm_tags FROM ({src}) AS src WHERE false)"
            try:
                with side_connection(con) as side:
                    same = side.execute(f"DESCRIBE WITH src AS ({joined(shape)}) {body_m}").fetchall()
                _MEMO_BINDS[key] = [(r[0], r[1]) for r in same] == described
            except duckdb.Error:
                _MEMO_BINDS[key] = False
        if not _MEMO_BINDS[key]:
            return None
        create = (f"CREATE OR REPLACE TEMP TABLE {TAG_MEMO} AS SELECT *, {expr} AS ba_tm_tags FROM "
                  f"(SELECT {cols}, count(*) AS ba_tm_lines FROM ({src}) AS src GROUP BY ALL) AS src")
        return create, joined(TAG_MEMO), body_m

    def tag_memo(self, con: duckdb.DuckDBPyConnection) -> str | None:
        """Build the tag memo that :meth:`mapped_sql` planned (``memo=True``) on ``con`` and return the mapping
        that reads it; None when none was planned, or when the file has about as many distinct tag inputs as lines
        (the memo would only add its join).  Raises the ``duckdb.Error`` the mapping itself would raise for the
        same values (the memo evaluates the same expression on the file's own distinct inputs)."""
        if self.memo is None:
            return None
        create, sql = self.memo
        con.execute(create)
        row = con.execute(f"SELECT count(*), coalesce(sum(ba_tm_lines), 0) FROM {TAG_MEMO}").fetchone()
        distinct, lines = (int(row[0]), int(row[1])) if row else (0, 0)
        if distinct > TAG_MEMO_MIN and distinct * 2 > lines:
            con.execute(f"DROP TABLE {TAG_MEMO}")
            return None
        return sql

    def _wrap(self, with_src: str, body: str, provided: set[str], fp: str, ingest_id: int) -> str:
        """The mapping's outer SELECT (every canonical column) over ``body``, after ``with_src``."""
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
        self.written = []
        for c in schema.COLUMNS:
            if c.name in fixed or c.name in provided or c.name in ("BillingPeriodStart", "BillingPeriodEnd", "Tags"):
                self.written.append(c.name)
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
        return f"{with_src}SELECT {', '.join(out)} FROM ({body}) AS m"


def diagnose(con: duckdb.DuckDBPyConnection, mf: MappedFile, original: Exception) -> InputError:
    """After a failed read: find the first row and column that cannot be parsed, is implausible or is missing."""
    refused = re.search(re.escape(fm.ROW_ERROR) + r"\|(\d+)\|([^|\n]*)\|([^\n]*)", str(original))
    if refused:  # a mapping refused a row (formats.row_error)
        return InputError(mf.display, refused.group(3).strip(), row=int(refused.group(1)), column=refused.group(2))
    with side_connection(con) as side:  # a probe that fails must not abort the caller's transaction
        return _diagnose(side, mf, original)


def _diagnose(con: duckdb.DuckDBPyConnection, mf: MappedFile, original: Exception) -> InputError:
    by_lower = mf.by_name()
    declared = mf.declared()
    required = {n.lower() for n in mf.fmt.required}
    row = "file_row_number + 1" if mf.kind == "parquet" else "row_number() OVER ()"
    for name, kind in declared.items():
        actual = by_lower.get(name.lower())
        if actual is None or kind not in (fm.NUM, fm.TIME):
            continue
        typ = mf.cols[actual]
        ref = "raw." + ident(actual)
        if typ == "JSON":
            ref = f"json_extract_string({ref}, '$')"
        checks: list[tuple[str, str]] = []  # (condition on the raw value v and the parsed value p, message)
        if kind == fm.NUM:
            if typ.startswith("DECIMAL"):
                parsed = ref
            elif typ in NUMERIC_TYPES:
                # in a CASE: DuckDB's statistics otherwise prove TRY_CAST(double) never NULL, missing NaN
                parsed = f"CASE WHEN {ref} IS NULL THEN NULL ELSE TRY_CAST(CAST({ref} AS VARCHAR) AS {schema.MONEY}) END"
                checks.append(("v IS NOT NULL AND p IS NULL", "cannot read {v} as a number"))
            else:
                parsed = f"{'ba_try_num_dc' if mf.decimal_comma else 'ba_try_num'}({ref})"
                dc = " (the file writes numbers with a decimal comma)" if mf.decimal_comma else ""
                checks.append(("NOT ba_isnull(v) AND p IS NULL", "cannot read {v} as a number" + dc))
            checks.append((f"abs(p) >= CAST({MAX_AMOUNT} AS DECIMAL(38,12))",
                           f"the amount {{v}} is out of range (billing-audit reads numbers under {MAX_AMOUNT:.0e} in "
                           "magnitude, so every sum fits DECIMAL(38,12))"))
            if name.lower() in required:
                checks.append(("p IS NULL", "no value ({v}) in a column " + mf.fmt.id + " requires (empty, NULL and NaN are none)"))
        else:
            if typ == "TIMESTAMP":
                parsed = f"CAST({ref} AS TIMESTAMP)"
            else:
                parsed = f"ba_try_ts({ref}{', day_first := true' if mf.day_first else ''})"
                checks.append(("NOT ba_isnull(v) AND p IS NULL", "cannot read {v} as a date"))
            checks.append(("NOT ba_in_window(p)", f"the date {{v}} is implausible (before {EARLIEST_DATE} or more than a "
                                                  "year from today): a misread year?"))
        for cond, message in checks:
            sql = (
                f"SELECT _row, v FROM (SELECT {row} AS _row, CAST({ref} AS VARCHAR) AS v, {parsed} AS p "
                f"FROM {mf.reader()} AS raw) WHERE {cond} ORDER BY _row LIMIT 1"
            )
            try:
                hit = con.execute(sql).fetchone()
            except duckdb.Error:
                continue
            if hit:
                v = "" if hit[1] is None else hit[1]
                shown = v if len(v) <= 60 else v[:57] + "..."
                return InputError(mf.display, message.format(v=repr(shown)), row=int(hit[0]), column=mf.shown(actual))
    msg = explain_duckdb_error(original)
    m = re.search(r"CSV Error on Line: (\d+)", msg)
    if "unicode" in msg.lower() or "utf-8" in msg.lower():
        msg = f"not UTF-8 text ({msg}); re-save the file as UTF-8"
    return InputError(mf.display, msg, row=int(m.group(1)) - 1 if m else None)
