"""Group export files into deliveries.

A delivery is one snapshot of one export as the provider wrote it: the files a
manifest lists (AWS CUR assembly, CUR 2.0 execution, Azure export run), the
files a provider's folder layout says are one run (a connector's ``LAYOUTS``),
or else the data files of one folder.  A delivery is ingested all at once and
replaces older deliveries of the same export for the same (provider, billing
account, billing period); see :mod:`billing_audit.store`.

Which delivery is newest, in this order (README: "Deliveries"):

1. a delivery that a manifest marks as outdated (another one is its period's current) always loses;
2. the delivery's own time: the manifest's run/execution time, else a time in its folder names
   (Azure ``yyyyMMddHHmm`` run folders, CUR 2.0 execution stamps), else what the rows say (GCP
   ``export_time``; else the latest usage the month-to-date snapshot holds);
3. a manifest's "current" mark;
4. last, the files' modification time (so ``touch`` alone cannot make an old snapshot newest).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from billing_audit import formats as fm
from billing_audit.errors import InputError
from billing_audit.reader import display_name, fingerprint, is_data_file, is_tarball, unpacked_tar

# Folder names that carry the time a delivery was written.
_PATH_STAMPS = [
    (re.compile(r"^(\d{12})$"), "%Y%m%d%H%M"),  # Azure export run yyyyMMddHHmm
    (re.compile(r"^(\d{8}T\d{6}Z?)$"), "%Y%m%dT%H%M%S"),
    (re.compile(r"^(\d{14})$"), "%Y%m%d%H%M%S"),
]


@dataclass
class Delivery:
    key: str
    files: list[Path]
    version: datetime
    version_source: str
    label: str = ""
    rank: int = 0  # 1 when a manifest marks it as its period's current delivery, -1 when as outdated
    export: str = ""  # the export it is a snapshot of ("" until ingest reads it from the format's layout)
    file_time: datetime | None = None  # the newest file's modification time: the last tie-break
    completed_with: list[Path] = field(default_factory=list)  # files of its earlier ingest it was completed with
    _fps: dict[Path, str] = field(default_factory=dict)

    def fingerprints(self, known: Callable[[Path], str | None] | None = None) -> dict[Path, str]:
        """sha256 of each file; ``known(path)`` may answer from an earlier ingest of the same unchanged file."""
        if not self._fps:
            self._fps = {f: (known(f) if known else None) or fingerprint(f) for f in self.files}
        return self._fps

    def combined_fingerprint(self) -> str:
        h = hashlib.sha256()
        for fp in sorted(self.fingerprints().values()):
            h.update(fp.encode())
        return h.hexdigest()

    @property
    def order(self) -> tuple[int, datetime, int, datetime]:
        return order_key(self.rank, self.version, self.file_time)


_EPOCH = datetime(1970, 1, 1)


def order_key(rank: int, version: datetime, file_time: datetime | None) -> tuple[int, datetime, int, datetime]:
    """How deliveries of one export compare: the bigger key is the newer delivery (see the module docstring)."""
    def naive(t: datetime | None) -> datetime:
        return _EPOCH if t is None else t.replace(tzinfo=None)

    return (0 if rank < 0 else 1, naive(version), rank, naive(file_time))


@dataclass(frozen=True)
class OverlapPolicy:
    """What to do when two exports deliver the same lines for one billing account and period.

    ``keep="larger"`` (the default): the export with more lines in that period keeps it (a billing-account
    export over a subscription export inside it); equal sizes: the newer delivery.  ``prefer`` lists export
    names (or ids) that win over any other, first listed first.  ``keep="both"`` counts both (the exports are
    known to be distinct and the shared lines a coincidence).  The config's ``[exports]`` table sets it.
    """

    keep: str = "larger"
    prefer: tuple[str, ...] = ()

    def rank(self, export: str) -> int:
        """Position in ``prefer`` (lower wins); len(prefer) when not listed."""
        base = export.split("@", 1)[0].split(":", 1)[-1]
        for i, name in enumerate(self.prefer):
            if name in (export, base) or export.endswith("/" + name):
                return i
        return len(self.prefer)


def _path_stamp(path: Path) -> datetime | None:
    for part in reversed(path.parts[:-1]):
        for rx, fmt in _PATH_STAMPS:
            m = rx.match(part)
            if m:
                try:
                    return datetime.strptime(m.group(1).rstrip("Z"), fmt).replace(tzinfo=UTC)
                except ValueError:
                    continue
    return None


def _mtime(files: list[Path]) -> datetime:
    return datetime.fromtimestamp(max(f.stat().st_mtime for f in files), tz=UTC)


def _delivery(hint: fm.DeliveryHint, files: list[Path], label: str) -> Delivery:
    stamp = hint.version or _path_stamp(files[0])
    return Delivery(
        key=hint.key,
        files=files,
        version=stamp or _mtime(files),
        version_source="manifest" if hint.version else ("path" if stamp else "file time"),
        label=label,
        export=hint.export,
        file_time=_mtime(files),
    )


FOLLOW_HINT = " (--follow-outside reads it)"


def _files_under(folder: Path, roots: tuple[Path, ...] | None, errors: list[InputError],
                 seen: set[Path] | None = None) -> list[Path]:
    """Every file under ``folder``, symlinks included only where they point inside ``roots`` (None: anywhere);
    a symlink pointing outside is skipped with an error naming it and its target.  Symlinked folders are not
    descended (a folder inside the roots is walked where it is)."""
    out: list[Path] = []
    seen = seen if seen is not None else set()
    seen.add(folder.resolve())
    for dirpath, dirnames, filenames in os.walk(folder, followlinks=False):
        here = Path(dirpath)
        for name in sorted(dirnames):
            q = here / name
            if q.is_symlink():
                if roots is None:  # followed (outside allowed), each folder once: a link loop ends
                    if q.resolve() not in seen and not any(a in seen for a in q.resolve().parents):
                        out.extend(_files_under(q.resolve(), None, errors, seen))
                elif not fm.inside(q, roots):
                    errors.append(InputError(display_name(q), f"a symlink to {q.resolve()}, outside the input path(s): "
                                                              f"skipped{FOLLOW_HINT}"))
        for name in sorted(filenames):
            q = here / name
            if q.is_symlink() and roots is not None and not fm.inside(q, roots):
                errors.append(InputError(display_name(q), f"a symlink to {q.resolve()}, outside the input path(s): "
                                                          f"skipped{FOLLOW_HINT}"))
                continue
            if q.is_file():
                out.append(q)
    return out


def walk(paths: list[Path], *, unpack: ExitStack | None = None, follow_outside: bool = False,
         unpacked: list[Path] | None = None) -> tuple[list[Path], list[Path], list[InputError]]:
    """Data files and manifests under the given files/folders, sorted.

    Only files under the paths named are read (a named file: its folder): symlinks pointing elsewhere are
    skipped with an error, unless ``follow_outside``.  With ``unpack``, a tarball (.tar, .tar.gz, .tgz) is
    read like a folder: unpacked into a temporary folder that ``unpack`` removes when it closes."""
    data: set[Path] = set()
    manifests: set[Path] = set()
    errors: list[InputError] = []
    readers = fm.manifest_readers()
    queue = list(paths)
    roots = None if follow_outside else input_roots(paths)
    while queue:
        p = queue.pop(0)
        if not p.exists():
            errors.append(InputError(display_name(p), "no such file or folder"))
            continue
        if p.is_file() and is_tarball(p) and unpack is not None:
            try:
                dest = unpack.enter_context(unpacked_tar(p))
            except InputError as e:
                errors.append(e)
                continue
            if roots is not None:
                roots = (*roots, dest.resolve())
            if unpacked is not None:
                unpacked.append(dest.resolve())
            queue.append(dest)
            continue
        candidates = [p] if p.is_file() else _files_under(p, roots, errors)
        for q in candidates:
            if any(r.matches(q) for r in readers):
                manifests.add(q)
            elif is_data_file(q) or _event_gz(q):
                data.add(q)
            elif is_tarball(q) and unpack is not None and not p.is_file():
                queue.append(q)
            elif p.is_file():
                errors.append(
                    InputError(display_name(q), "not an export file (expected .csv, .csv.gz, .zip, .parquet, .json, "
                                                ".jsonl, .tar, .tar.gz or .tgz)")
                )
    return sorted(data), sorted(manifests), errors


def _event_gz(path: Path) -> bool:
    """A ``.gz`` file with no data suffix that holds interruption events (CloudWatch Logs exports ``000000.gz``,
    Firehose objects): read like a data file, recognised from its content."""
    if not path.name.lower().endswith(".gz") or path.name.startswith("."):
        return False
    from billing_audit.events import is_event_file

    return is_event_file(path)


def input_roots(paths: list[Path]) -> tuple[Path, ...]:
    """The folders files may be read from: each named folder, and a named file's own folder (resolved)."""
    return tuple(sorted({(p if p.is_dir() else p.parent).resolve() for p in paths if p.exists()}))


def group(paths: list[Path], *, unpack: ExitStack | None = None, follow_outside: bool = False,
          set_aside: Callable[[Path], bool] | None = None, aside: list[Path] | None = None,
          ) -> tuple[list[Delivery], list[InputError]]:
    """Deliveries found under the paths, oldest first (see :func:`walk` for ``unpack`` and ``follow_outside``).

    A manifest key resolving outside the input paths makes its delivery an error naming the key.  A data file
    no manifest claims for which ``set_aside(file)`` is true (a price file, recognised from its content) is in
    no delivery: it is appended to ``aside`` for the caller."""
    unpacked: list[Path] = []
    data, manifests, errors = walk(paths, unpack=unpack, follow_outside=follow_outside, unpacked=unpacked)
    roots = None if follow_outside else input_roots(paths) + tuple(unpacked)
    readers = fm.manifest_readers()
    claimed: dict[Path, Delivery | None] = {}
    deliveries: dict[str, Delivery] = {}
    ranks: dict[str, int] = {}
    for m in manifests:
        hint = None
        try:
            # several readers may claim a name (*-Manifest.json): the first that understands it wins
            with fm.input_roots(roots):
                for reader in (r for r in readers if r.matches(m)):
                    hint = reader.read(m)
                    if hint is not None:
                        break
        except fm.OutsideInput as e:
            errors.append(InputError(display_name(m), f"{e}{FOLLOW_HINT}", column=None))
            continue
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            errors.append(InputError(display_name(m), f"unreadable manifest: {e}"))
            continue
        if hint is None:
            continue
        files = [f for f in hint.files if f.exists()]
        if hint.missing:
            # a partly downloaded delivery must not replace a complete one
            errors.append(InputError(display_name(m), f"manifest lists {len(hint.missing)} file(s) not found locally "
                                              f"(first: {hint.missing[0]}); this delivery is not ingested"))
            for f in files:
                claimed[f] = None
            continue
        rank = 1 if hint.newest else (-1 if hint.outdated else 0)
        ranks[hint.key] = max(ranks.get(hint.key, rank), rank)
        if not files:
            continue
        if hint.key in deliveries:
            continue
        stamp = hint.version or _path_stamp(files[0])
        d = _delivery(hint, sorted(set(files)), hint.label or display_name(m))
        deliveries[d.key] = d
        for f in d.files:
            claimed[f] = d
    # Files no manifest claims: what the providers' folder layouts say (one file per run, ...), else one
    # delivery per folder.
    by_dir: dict[Path, list[Path]] = {}
    for f in data:
        if f in claimed:
            continue
        if set_aside is not None and set_aside(f):
            if aside is not None:
                aside.append(f)
            continue
        by_dir.setdefault(f.parent, []).append(f)
    layouts = fm.layout_readers()
    for folder, files in by_dir.items():
        rest = list(files)
        for layout in layouts:
            for hint in layout.split(rest):
                taken = [f for f in hint.files if f in rest]
                if taken and hint.key not in deliveries:
                    deliveries[hint.key] = _delivery(hint, taken, hint.label or str(taken[0]))
                rest = [f for f in rest if f not in taken]
        if not rest:
            continue
        stamp = _path_stamp(rest[0])
        shown = display_name(rest[0])
        # a tarball's folder is named by the archive and the member folder (its temporary place changes)
        key = f"folder:{folder.resolve()}" if shown == str(rest[0]) else f"folder:{shown.rsplit('/', 1)[0]}"
        deliveries[key] = Delivery(
            key=key,
            files=rest,
            version=stamp or _mtime(rest),
            version_source="path" if stamp else "file time",
            label=str(folder) if shown == str(rest[0]) else shown.rsplit("/", 1)[0],
            file_time=_mtime(rest),
        )
    for k, rank in ranks.items():
        if k in deliveries:
            deliveries[k].rank = rank
    return sorted(deliveries.values(), key=lambda d: (d.order, d.key)), errors
