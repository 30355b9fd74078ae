"""Interruption events: what the providers' own logs say happened to a spot resource, beside the bill.

An event file is recognised from its content (never its name) and read into ``interruption_events`` (ddl.py):
one row per (provider, resource, time, kind), so re-reading the same file, or a file that overlaps one read
before, adds nothing twice (the load says how many were already held).  The provider formats live in the
connectors' ``events`` parts (``SOURCES``: :class:`EventSource`); this module knows none of them by name and
reads the one provider-neutral format itself: a CSV ``resource_id, time, kind[, provider]`` for the user's
own sources (node termination handlers, schedulers).

A file's records are JSON values one after another (newline-delimited, or concatenated as Firehose writes
them without a delimiter), CloudWatch Logs export lines ``<ISO timestamp> <json>``, or one JSON object holding
a list of records (CloudTrail's ``Records``, Azure's ``records``); ``.gz`` is read decompressed.  A record of the
file's source that is not an interruption (a CloudTrail ``RunInstances``) is counted as read and not kept; a
record the source cannot read (an eviction with no instance id) fails the file, naming it, the record and the key.
"""

from __future__ import annotations

import csv
import functools
import gzip
import hashlib
import io
import json
import re
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any, ClassVar

import duckdb

from billing_audit import registry
from billing_audit.errors import BillingAuditError, InputError

if TYPE_CHECKING:
    from billing_audit.store import IngestReport, Store

KINDS = ("interruption_warning", "eviction", "preemption", "rebalance_recommendation")
INTERRUPTING = ("interruption_warning", "eviction", "preemption")  # what counts as an interruption
SNIFF = 256 << 10
MAX_FILE = 512 << 20  # an event file larger than this (decompressed) is refused: it is read whole (Firehose objects: 128 MiB at most)
_CW_LINE = re.compile(r"^(\d{4}-\d{2}-\d{2}T[0-9:.]+(?:Z|[+-]\d{2}:?\d{2})?)\s+(\{.*)$", re.S)


@dataclass(frozen=True)
class Event:
    provider: str
    resource_id: str
    time: datetime  # UTC, naive
    kind: str
    row: int  # the record's number in its file (1-based)


class EventSource:
    """One provider event format.  ``recognise`` says whether a record is of this format (any of its records,
    interruption or not); ``read`` turns one record into its interruption events ([] for a record of the format
    that is no interruption) and raises ``ValueError`` naming the key for one it cannot read."""

    id: ClassVar[str]
    provider: ClassVar[str]
    title: ClassVar[str]

    def recognise(self, record: Any) -> bool:  # pragma: no cover - abstract
        raise NotImplementedError

    def read(self, record: Any) -> list[tuple[str, datetime, str]]:  # pragma: no cover - abstract
        """(resource id, time UTC, kind) of each interruption the record reports."""
        raise NotImplementedError


def utc(text: Any, key: str) -> datetime:
    """An ISO 8601 time (``Z`` or an offset; any number of fraction digits) as naive UTC; ValueError naming ``key``."""
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{key}: a time is missing")
    s = text.strip().replace(" UTC", "Z")
    s = re.sub(r"(\.\d{6})\d+", r"\1", s)  # nanoseconds (GCP) to microseconds
    try:
        t = datetime.fromisoformat(s)
    except ValueError:
        raise ValueError(f"{key}: cannot read {text!r} as an ISO 8601 time") from None
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def text_at(record: Any, *path: str) -> str | None:
    """The non-empty string at ``path`` in nested dicts, else None."""
    cur = record
    for p in path:
        if not isinstance(cur, dict) or p not in cur:
            return None
        cur = cur[p]
    return cur.strip() if isinstance(cur, str) and cur.strip() else None


@functools.cache
def _parts() -> tuple[ModuleType, ...]:
    return tuple(registry.part(n, "events") for n in registry.with_part("events"))


def sources() -> list[EventSource]:
    """Every connector's event formats."""
    return [s for mod in _parts() for s in getattr(mod, "SOURCES", [])]


def describe_sources() -> str:
    return "\n".join(f"  {s.provider:<6} {s.title}" for s in sources()) + "\n  any    CSV resource_id, time, kind[, provider]"


# -- reading ---------------------------------------------------------------------------------------------------------
def _open_text(path: Path) -> io.TextIOBase:
    raw = gzip.open(path, "rb") if _gz(path) else open(path, "rb")  # noqa: SIM115
    return io.TextIOWrapper(raw, encoding="utf-8-sig", errors="strict")


def _gz(path: Path) -> bool:
    try:
        with open(path, "rb") as f:
            return f.read(2) == b"\x1f\x8b"
    except OSError:
        return False


def records(text: str) -> Iterator[tuple[int, Any]]:
    """(record number, JSON value) of a file's text: a wrapping ``{"Records"|"records": [...]}`` object is its
    list's elements; CloudWatch Logs export lines lose their timestamp prefix.  ValueError names the record."""
    dec = json.JSONDecoder()
    pos, n, size, row = 0, 0, len(text), 0
    while True:
        while pos < size and text[pos] in " \t\r\n":
            pos += 1
        if pos >= size:
            return
        n += 1
        if text[pos] not in "{[":
            end = text.find("\n", pos)
            line = text[pos:] if end < 0 else text[pos:end]
            m = _CW_LINE.match(line)
            if not m:
                raise ValueError(f"record {n}: not JSON and not a CloudWatch Logs line '<timestamp> <json>'")
            try:
                value = json.loads(m.group(2))
            except json.JSONDecodeError as e:
                raise ValueError(f"record {n}: malformed JSON after the timestamp ({e.msg})") from None
            pos = size if end < 0 else end + 1
        else:
            try:
                value, pos = dec.raw_decode(text, pos)
            except json.JSONDecodeError as e:
                raise ValueError(f"record {n}: malformed JSON ({e.msg} at character {e.pos})") from None
        wrapped = _wrapped(value)
        for v in [value] if wrapped is None else wrapped:
            row += 1
            yield row, v


def _wrapped(value: Any) -> list[Any] | None:
    if isinstance(value, dict) and len(value) == 1:
        (k, v), = value.items()
        if k in ("Records", "records") and isinstance(v, list):
            return v
    return None


def _source_of(first: Any) -> EventSource | None:
    for s in sources():
        try:
            if s.recognise(first):
                return s
        except Exception:  # noqa: BLE001, S112 - a recogniser tripping over a record does not recognise it
            continue
    return None


CSV_REQUIRED = ("resource_id", "time", "kind")


def _csv_header(head: str) -> list[str] | None:
    line = head.splitlines()[0] if head else ""
    cols = [c.strip().lower() for c in next(csv.reader([line]), [])]
    return cols if all(c in cols for c in CSV_REQUIRED) and set(cols) <= {*CSV_REQUIRED, "provider"} else None


def sniff(path: Path) -> EventSource | str | None:
    """What event format a file is of: its source, ``"csv"`` (the generic CSV), or None (not an event file)."""
    name = path.name.lower()
    if name.endswith(".parquet") or name.endswith(".zip"):
        return None
    try:
        with _open_text(path) as f:
            head = f.read(SNIFF)
    except (OSError, EOFError, zlib.error, UnicodeDecodeError, ValueError):
        return None
    stripped = head.lstrip()
    if not stripped:
        return None
    if stripped[0] not in "{[" and not _CW_LINE.match(stripped.split("\n", 1)[0]):
        return "csv" if _csv_header(stripped) else None
    try:
        it = records(head)
        _, first = next(it)
    except (ValueError, StopIteration):
        return None
    return _source_of(first)


def is_event_file(path: Path) -> bool:
    return sniff(path) is not None


def read_file(path: Path, display: str) -> tuple[list[Event], int, str]:
    """(events, records read, format title) of one event file; InputError naming the file, record and key."""
    found = sniff(path)
    if found is None:
        raise InputError(display, "not an interruption event file")
    try:
        with _open_text(path) as f:
            text = f.read(MAX_FILE + 1)
    except (OSError, EOFError, zlib.error) as e:
        raise InputError(display, f"cannot read file ({e})") from None
    except UnicodeDecodeError as e:
        raise InputError(display, f"not UTF-8 text ({e.reason} at byte {e.start})") from None
    if len(text) > MAX_FILE:
        raise InputError(display, f"an event file over {MAX_FILE >> 20} MiB (decompressed) is refused: split it")
    if found == "csv":
        return _read_csv(text, display), max(text.count("\n") - 1, 0), "interruption events CSV"
    assert isinstance(found, EventSource)
    out: list[Event] = []
    n = 0
    try:
        for row, rec in records(text):
            n += 1
            if not found.recognise(rec):
                raise InputError(display, f"the record is not a {found.title} record like the file's first", row=row)
            try:
                got = found.read(rec)
            except ValueError as e:
                raise InputError(display, f"{found.title}: {e}", row=row) from None
            for rid, t, kind in got:
                out.append(Event(found.provider, rid, t, kind, row))
    except ValueError as e:  # from records(): malformed JSON, named by record
        raise InputError(display, str(e)) from None
    return out, n, found.title


def _read_csv(text: str, display: str) -> list[Event]:
    reader = csv.reader(io.StringIO(text))
    header = [c.strip().lower() for c in next(reader)]
    at = {c: header.index(c) for c in header}
    out = []
    for i, rec in enumerate(reader, start=1):
        if not any(c.strip() for c in rec):
            continue
        if len(rec) != len(header):
            raise InputError(display, f"{len(rec)} fields, the header has {len(header)}", row=i)
        rid = rec[at["resource_id"]].strip()
        if not rid:
            raise InputError(display, "a resource id is missing", row=i, column="resource_id")
        kind = rec[at["kind"]].strip().lower()
        if kind not in KINDS:
            raise InputError(display, f"unknown kind {kind!r} (expected one of {', '.join(KINDS)})", row=i, column="kind")
        try:
            t = utc(rec[at["time"]], "time")
        except ValueError as e:
            raise InputError(display, str(e).split(": ", 1)[1], row=i, column="time") from None
        if "provider" in at and rec[at["provider"]].strip():
            prov = rec[at["provider"]].strip().lower()
            if prov not in registry.providers():
                raise InputError(display, f"unknown provider {prov!r} (expected one of {', '.join(registry.providers())})",
                                 row=i, column="provider")
        else:
            guess = _guess_provider(rid)
            if guess is None:
                raise InputError(display, f"cannot tell the provider of {rid!r}: give a provider column", row=i,
                                 column="provider")
            prov = guess
        out.append(Event(prov, rid, t, kind, i))
    return out


def _guess_provider(rid: str) -> str | None:
    """The provider a resource id is of when its shape says so (each connector's ``events.owns``)."""
    for mod in _parts():
        owns = getattr(mod, "owns", None)
        if owns is not None and owns(rid):
            return str(mod.PROVIDER)
    return None


# -- loading ---------------------------------------------------------------------------------------------------------
@dataclass
class EventFile:
    file: str
    status: str  # loaded | failed | unchanged (a pulled file read before, the same since: not read again)
    format: str = ""
    records: int = 0  # records read (interruptions or not)
    events: int = 0  # interruption events the file reports
    added: int = 0  # new to the store
    held: int = 0  # already in the store (an earlier file, or the same one again)
    repeated: int = 0  # repeat an event earlier in the same file
    message: str = ""


@dataclass
class EventLoad:
    files: list[EventFile] = field(default_factory=list)
    errors: list[InputError] = field(default_factory=list)

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    def notes(self) -> list[str]:
        out = []
        for f in self.files:
            other = f.records - f.events
            if f.held:
                out.append(f"{f.file}: {f.held} interruption event(s) already in the store (counted once)")
            if f.repeated:
                out.append(f"{f.file}: {f.repeated} event(s) repeat one earlier in the file (counted once)")
            if other > 0 and f.format != "interruption events CSV":
                out.append(f"{f.file}: {other} record(s) are not interruption events ({f.format}); not kept")
        return out

    def summary(self) -> str:
        ok = [f for f in self.files if f.status == "loaded"]
        rep = sum(f.repeated for f in ok)
        same = sum(1 for f in self.files if f.status == "unchanged")
        s = (f"{len(ok)} event file(s) read ({sum(f.events for f in ok):,} interruption events: "
             f"{self.added:,} new, {sum(f.held for f in ok):,} already held"
             + (f", {rep:,} repeated in their file" if rep else "") + ")")
        s += f", {same} unchanged since they were read (not read again)" if same else ""
        return s + (f", {len(self.errors)} failed" if self.errors else "")


def load_paths(con: duckdb.DuckDBPyConnection, paths: list[Path]) -> EventLoad:
    """Read each event file into ``interruption_events``, one transaction per file (a failing file adds nothing)."""
    from billing_audit.reader import display_name

    load = EventLoad()
    for p in paths:
        _load_file(con, load, p, display_name(p))
    return load


def _load_file(con: duckdb.DuckDBPyConnection, load: EventLoad, path: Path, shown: str) -> bool:
    """One event file into ``interruption_events`` (its own transaction), or its error into `load` (False)."""
    try:
        events, n, title = read_file(path, shown)
    except InputError as e:
        load.errors.append(e)
        load.files.append(EventFile(shown, "failed", message=e.reason))
        return False
    load.files.append(_insert(con, events, n, title, shown))
    return True


PULLED = "events:"  # file_stats fingerprints of the event files a pull read (beside the exports' own)


def load_pulled(con: duckdb.DuckDBPyConnection, files: list[tuple[Path, str]]) -> EventLoad:
    """The event files a pull fetched into its cache, each named by its remote key (``s3://bucket/key``): read
    into ``interruption_events`` as :func:`load_paths` does; one this store read before from the same unchanged
    local file (size, modification and change time in ``file_stats``) is counted ``unchanged`` and not read again.
    A file that is not an event file fails, named by its key, and adds nothing."""
    load = EventLoad()
    for path, shown in files:
        st = path.stat()
        known = con.execute("SELECT 1 FROM file_stats WHERE path = ? AND size = ? AND mtime_ns = ? AND ctime_ns = ? "
                            "AND starts_with(fingerprint, ?)",
                            [str(path.resolve()), st.st_size, st.st_mtime_ns, st.st_ctime_ns, PULLED]).fetchone()
        if known:
            load.files.append(EventFile(shown, "unchanged"))
            continue
        if not _load_file(con, load, path, shown):
            continue
        with open(path, "rb") as f:
            digest = hashlib.file_digest(f, "sha256").hexdigest()
        con.execute("INSERT OR REPLACE INTO file_stats (path, size, mtime_ns, fingerprint, ctime_ns) VALUES (?, ?, ?, ?, ?)",
                    [str(path.resolve()), st.st_size, st.st_mtime_ns, PULLED + digest, st.st_ctime_ns])
    return load


def ingest_pulled(store: Store, files: list[tuple[Path, str]]) -> IngestReport:
    """:func:`load_pulled` into ``store``, as the report ``Store.ingest`` gives (its events, errors and notes)."""
    from billing_audit.store import IngestReport

    if store.read_only:
        raise BillingAuditError(f"{store.path}: opened read-only, cannot store interruption events")
    load = load_pulled(store.con, files)
    return IngestReport(errors=list(load.errors), notes=load.notes(), events=load)


def _insert(con: duckdb.DuckDBPyConnection, events: list[Event], n: int, title: str, shown: str) -> EventFile:
    seen: dict[tuple[str, str, datetime, str], Event] = {}
    for e in events:
        seen.setdefault((e.provider, e.resource_id, e.time, e.kind), e)
    now = datetime.now(UTC).replace(tzinfo=None)
    con.execute("BEGIN TRANSACTION")
    try:
        con.execute("CREATE OR REPLACE TEMP TABLE ba_ev_new (provider VARCHAR, resource_id VARCHAR, time TIMESTAMP, "
                    "kind VARCHAR, source_file VARCHAR, source_row BIGINT, source_format VARCHAR, ingested_at TIMESTAMP)")
        if seen:
            con.executemany("INSERT INTO ba_ev_new VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                            [[e.provider, e.resource_id, e.time, e.kind, shown, e.row, title, now] for e in seen.values()])
        row = con.execute("SELECT count(*) FROM ba_ev_new n WHERE NOT EXISTS (SELECT 1 FROM interruption_events h "
                          "WHERE h.provider = n.provider AND h.resource_id = n.resource_id AND h.time = n.time "
                          "AND h.kind = n.kind)").fetchone()
        added = int(row[0]) if row else 0
        con.execute("INSERT INTO interruption_events SELECT * FROM ba_ev_new n WHERE NOT EXISTS (SELECT 1 FROM "
                    "interruption_events h WHERE h.provider = n.provider AND h.resource_id = n.resource_id "
                    "AND h.time = n.time AND h.kind = n.kind)")
        con.execute("DROP TABLE ba_ev_new")
        con.execute("COMMIT")
    except BaseException:
        con.execute("ROLLBACK")
        raise
    return EventFile(shown, "loaded", title, n, len(events), added, len(seen) - added, len(events) - len(seen))
