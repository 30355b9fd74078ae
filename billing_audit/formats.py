"""The interface every export format implements, and the registry of formats.

A format is data: which source columns it reads (with the kind each is parsed
as), how it recognises a file from its own header or schema, and one SQL SELECT
that maps the parsed source (a relation called ``src``) onto canonical columns
(see :mod:`billing_audit.schema`).  Provider-specific formats live in
the connector packages (found through :mod:`billing_audit.registry`); this module knows none of them by name.
"""

from __future__ import annotations

import contextvars
import functools
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import ClassVar

from billing_audit.registry import connector
from billing_audit.registry import names as registry_names
from billing_audit.sql import lit

# Kinds a source column is parsed as before the mapping SQL sees it.
TEXT = "text"  # VARCHAR, trimmed of nothing; ids stay text (leading zeros kept)
NUM = "num"  # DECIMAL(38,12): "1.5", "1.2E-5", doubles; "" -> NULL; anything else is an error
TIME = "time"  # TIMESTAMP (UTC): ISO with or without zone, M/D/YYYY, YYYY-MM-DD; "" -> NULL
RAW = "raw"  # as the reader typed it (nested parquet/json columns)

FILE_KINDS = ("parquet", "csv", "json")

# A mapping refuses one row with row_error(); the reader turns the raised text into an InputError naming
# the file, the row and the column (see billing_audit.reader.diagnose).
ROW_ERROR = "billing-audit row error"


def row_error(column: str, message: str) -> str:
    """SQL that, when evaluated for a row of ``src``, fails the file naming that row and ``column``."""
    return f"error({lit(ROW_ERROR + '|')} || CAST(_row AS VARCHAR) || {lit('|' + column + '|' + message)})"


@dataclass
class ExportFormat:
    """One export format.  Subclasses set the class attributes; few override methods."""

    id: ClassVar[str]
    provider: ClassVar[str]
    title: ClassVar[str]
    file_kinds: ClassVar[tuple[str, ...]] = ("parquet", "csv")
    columns: ClassVar[dict[str, str]] = {}
    required: ClassVar[tuple[str, ...]] = ()
    select_sql: ClassVar[str] = ""
    priority: ClassVar[int] = 50  # detection order: lower first; generic formats use 90

    def detect(self, cols: dict[str, str], kind: str) -> bool:  # pragma: no cover - abstract
        """True when a file with these columns (lower-cased name -> DuckDB type) is this format."""
        raise NotImplementedError

    def resemblance(self, cols: dict[str, str]) -> tuple[int, int]:
        """How much a file that is not this format looks like it: (required columns found, declared columns found)."""
        declared = {n.lower() for n in self.columns} | {n.lower() for n in self.required}
        return (len(self.required) - len(self.missing_required(cols)), sum(1 for n in cols if n in declared))

    def missing_required(self, cols: dict[str, str]) -> list[str]:
        """The required columns a file with these columns (lower-cased names) lacks, as the format spells them."""
        return [n for n in self.required if n.lower() not in cols]

    def normalize_name(self, name: str) -> str:
        """The declared name a source column answers to (matching is case-insensitive)."""
        return name.lower()

    def dynamic_columns(self, cols: dict[str, str]) -> dict[str, str]:
        """Extra source columns this file has that the format reads (e.g. per-tag columns)."""
        return {}

    def render(self, cols: dict[str, str]) -> str:
        """The mapping SELECT for a file with these columns."""
        return self.select_sql

    def tag_inputs(self, cols: dict[str, str]) -> tuple[str, list[str]] | None:
        """(the Tags expression exactly as :meth:`render` writes it for a file with these columns, the ``src``
        columns it reads), when it reads nothing else.  The store's ingest then builds each tag map once per
        distinct input rather than once per line (:meth:`billing_audit.reader.MappedFile.mapped_sql`): DuckDB
        builds a MAP at ~0.4 µs an entry, about a third of a 1M-line CUR's whole ingest.  None: per line."""
        return None

    def checks(self) -> tuple[Check, ...]:
        """What ``validate`` checks a file of this format for beyond what every format is checked for
        (FOCUS files: conformance to the specification)."""
        return ()

    def export_of(self, path: Path) -> str | None:
        """The export a file of this format belongs to, read from where the provider puts it (its folder
        layout or file name), for files no manifest claims; None when the layout does not say."""
        return None


@dataclass(frozen=True)
class Check:
    """One thing ``billing-audit validate`` checks a file for, with a stable id.

    Either ``column``: a source column the file must have; or ``where``: a SQL predicate over the file's
    canonical lines (``line_items`` columns) that marks each line breaking it (``where_column`` names the
    column it is about)."""

    id: str
    severity: str  # error | warning
    message: str
    where: str | None = None
    column: str | None = None
    where_column: str | None = None


@dataclass
class DeliveryHint:
    """What a manifest says about a delivery: its files and when it was made."""

    key: str
    files: list[Path]
    export: str = ""  # which export (report, data export, scheduled export, table) the delivery is a snapshot of
    version: datetime | None = None
    label: str = ""
    newest: bool = False  # the manifest marks this delivery as its period's current one
    outdated: bool = False  # a manifest marks another delivery of the period as current
    missing: list[str] = field(default_factory=list)  # files the manifest lists that are not here


class ManifestReader:
    """Reads one provider's manifest files into a :class:`DeliveryHint`."""

    name_pattern: ClassVar[re.Pattern[str]]

    def matches(self, path: Path) -> bool:
        return bool(self.name_pattern.fullmatch(path.name))

    def read(self, path: Path) -> DeliveryHint | None:  # pragma: no cover - abstract
        raise NotImplementedError


class LayoutReader:
    """Splits the data files of one folder that no manifest claims into the deliveries a provider's folder
    layout says they are (e.g. one file per export run), when the folder is not simply one delivery."""

    def split(self, files: list[Path]) -> list[DeliveryHint]:  # pragma: no cover - abstract
        """Hints for the files it recognises; the files it leaves out stay one delivery of their folder."""
        raise NotImplementedError


def table_columns(text: str) -> tuple[tuple[str, str], ...]:
    """A warehouse table's columns, declared as data: one ``name type`` line each, in the table's order."""
    return tuple((name, typ) for name, typ in (line.split() for line in text.strip().splitlines()))


def has_all(cols: dict[str, str], *names: str) -> bool:
    return all(n.lower() in cols for n in names)


def has_any(cols: dict[str, str], *names: str) -> bool:
    return any(n.lower() in cols for n in names)


class OutsideInput(ValueError):
    """A manifest key that resolves to a file outside the paths the user named."""

    def __init__(self, key: str, target: Path, roots: tuple[Path, ...]):
        self.key = key
        super().__init__(f"the manifest key {key!r} resolves to {target}, outside the input path(s) "
                         f"{', '.join(map(str, roots))}; this delivery is not ingested")


# The folders a manifest's keys may resolve into: the paths the user named (None: anywhere, the caller's choice).
_ROOTS: contextvars.ContextVar[tuple[Path, ...] | None] = contextvars.ContextVar("ba_input_roots", default=None)


@contextmanager
def input_roots(roots: tuple[Path, ...] | None) -> Iterator[None]:
    """Manifest keys resolved inside the block are looked up, and must land, under ``roots`` (resolved folders)."""
    token = _ROOTS.set(roots)
    try:
        yield
    finally:
        _ROOTS.reset(token)


def inside(path: Path, roots: tuple[Path, ...]) -> bool:
    """True when ``path`` (symlinks resolved) is one of ``roots`` or under one."""
    real = path.resolve()
    return any(real == r or r in real.parents for r in roots)


def resolve_keys(manifest: Path, keys: list[str]) -> tuple[list[Path], list[str]]:
    """(local files found, keys not found) for the keys a manifest lists.

    Raises :class:`OutsideInput` (a ValueError) for a key that resolves outside the input paths."""
    found: list[Path] = []
    missing: list[str] = []
    for k in keys:
        f = resolve_key(manifest, k)
        if f is None:
            missing.append(k)
        else:
            found.append(f)
    return found, missing


def resolve_key(manifest: Path, key: str) -> Path | None:
    """Find the local copy of a bucket key named in a manifest, near the manifest: in its folder or up to four
    folders up.  Only a file under the input paths counts: a key found only outside them (``../`` in a key, or
    a copy beside some other folder) raises :class:`OutsideInput`."""
    parts = [p for p in key.split("/") if p]
    roots = _ROOTS.get()
    outside: Path | None = None
    for base in [manifest.parent, *list(manifest.parents)[:4]]:
        for i in range(len(parts)):
            cand = base.joinpath(*parts[i:])
            if cand.is_file():
                if roots is None or inside(cand, roots):
                    return cand
                outside = outside or cand
    if outside is not None and roots is not None:
        raise OutsideInput(key, outside.resolve(), roots)
    return None


def registry() -> list[ExportFormat]:
    """Every known format, most specific first (lower ``priority``, then id)."""
    return list(_formats())


def manifest_readers() -> list[ManifestReader]:
    """Every connector's manifest readers, in connector order."""
    return list(_manifests())


@functools.cache
def _formats() -> tuple[ExportFormat, ...]:
    found = [f for name in registry_names() for f in getattr(connector(name), "FORMATS", [])]
    return tuple(sorted(found, key=lambda f: (f.priority, f.id)))


@functools.cache
def _manifests() -> tuple[ManifestReader, ...]:
    return tuple(m for name in registry_names() for m in getattr(connector(name), "MANIFESTS", []))


def layout_readers() -> list[LayoutReader]:
    """Every connector's folder-layout readers (``LAYOUTS``), in connector order."""
    return list(_layouts())


@functools.cache
def _layouts() -> tuple[LayoutReader, ...]:
    return tuple(r for name in registry_names() for r in getattr(connector(name), "LAYOUTS", []))


def describe_formats() -> str:
    return "\n".join(f"  {f.id:<28} {f.title}" for f in registry())
