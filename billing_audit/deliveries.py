"""Group export files into deliveries.

A delivery is one snapshot of a provider's bill as the provider wrote it: the
files a manifest lists (AWS CUR assembly, CUR 2.0 execution, Azure export run),
or else the data files of one folder.  A delivery is ingested all at once and
replaces older deliveries of the same (provider, billing account, billing
period); see :mod:`billing_audit.store`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

from billing_audit import formats as fm
from billing_audit.errors import InputError
from billing_audit.reader import fingerprint, is_data_file

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
    rank: int = 0  # 1 when a manifest marks it as its period's current delivery
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
    def order(self) -> tuple[int, datetime]:
        return (self.rank, self.version)


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


def walk(paths: list[Path]) -> tuple[list[Path], list[Path], list[InputError]]:
    """Data files and manifests under the given files/folders, sorted."""
    data: set[Path] = set()
    manifests: set[Path] = set()
    errors: list[InputError] = []
    readers = fm.manifest_readers()
    for p in paths:
        if not p.exists():
            errors.append(InputError(str(p), "no such file or folder"))
            continue
        candidates = [p] if p.is_file() else [q for q in p.rglob("*") if q.is_file()]
        for q in candidates:
            if any(r.matches(q) for r in readers):
                manifests.add(q)
            elif is_data_file(q):
                data.add(q)
            elif p.is_file():
                errors.append(
                    InputError(str(q), "not an export file (expected .csv, .csv.gz, .zip, .parquet, .json or .jsonl)")
                )
    return sorted(data), sorted(manifests), errors


def group(paths: list[Path]) -> tuple[list[Delivery], list[InputError]]:
    """Deliveries found under the paths, oldest first."""
    data, manifests, errors = walk(paths)
    readers = fm.manifest_readers()
    claimed: dict[Path, Delivery | None] = {}
    deliveries: dict[str, Delivery] = {}
    ranks: dict[str, int] = {}
    for m in manifests:
        hint = None
        try:
            # several readers may claim a name (*-Manifest.json): the first that understands it wins
            for reader in (r for r in readers if r.matches(m)):
                hint = reader.read(m)
                if hint is not None:
                    break
        except (OSError, ValueError, KeyError, TypeError, json.JSONDecodeError) as e:
            errors.append(InputError(str(m), f"unreadable manifest: {e}"))
            continue
        if hint is None:
            continue
        files = [f for f in hint.files if f.exists()]
        if hint.missing:
            # a partly downloaded delivery must not replace a complete one
            errors.append(InputError(str(m), f"manifest lists {len(hint.missing)} file(s) not found locally "
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
        d = Delivery(
            key=hint.key,
            files=sorted(set(files)),
            version=stamp or _mtime(files),
            version_source="manifest" if hint.version else ("path" if stamp else "file time"),
            label=hint.label or str(m),
        )
        deliveries[d.key] = d
        for f in d.files:
            claimed[f] = d
    # Files no manifest claims: one delivery per folder.
    by_dir: dict[Path, list[Path]] = {}
    for f in data:
        if f not in claimed:
            by_dir.setdefault(f.parent, []).append(f)
    for folder, files in by_dir.items():
        stamp = _path_stamp(files[0])
        key = f"folder:{folder.resolve()}"
        deliveries[key] = Delivery(
            key=key,
            files=files,
            version=stamp or _mtime(files),
            version_source="path" if stamp else "file time",
            label=str(folder),
        )
    for k, rank in ranks.items():
        if k in deliveries:
            deliveries[k].rank = rank
    return sorted(deliveries.values(), key=lambda d: (d.order, d.key)), errors
