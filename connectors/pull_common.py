"""What every remote pull shares: the local cache, safe paths, retries and resumable downloads.

A pull has three steps, the same for every provider:

1. ``plan``: discover the exports and choose, per billing period, the newest complete
   delivery (never every snapshot) - a list of :class:`RemoteObject` grouped in
   :class:`PlannedDelivery`;
2. ``fetch``: download each object into the cache folder under its remote key (so the
   manifests' keys resolve locally), skipping objects whose ETag and size are unchanged
   since the last pull (``.pull-state.json``), resuming partial downloads (``*.part``);
3. ``ingest``: hand the delivery folders to ``Store.ingest``, which replaces the period
   atomically.  A failure before the ingest leaves the store untouched.
"""

from __future__ import annotations

import json
import os
import random
import re
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any, TypeVar

from billing_audit.errors import BillingAuditError

T = TypeVar("T")
STATE_FILE = ".pull-state.json"


class PullError(BillingAuditError):
    """A pull that cannot go on: no credentials, access denied, missing bucket/export/table."""


class RetryableError(Exception):
    """Throttling, 5xx or a dropped connection: worth another try."""


@dataclass
class RemoteObject:
    key: str  # the object's key / blob name, as the manifest names it
    size: int
    etag: str = ""
    url: str = ""  # how the provider's fetcher finds it, when not the key

    def state_id(self, source: str) -> str:
        return f"{source}/{self.key}"


@dataclass
class PlannedDelivery:
    period: str  # YYYY-MM
    label: str  # e.g. "gpu-cur assembly 1234" or "run 2026-11-02T05:12"
    objects: list[RemoteObject] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(o.size for o in self.objects)


def safe_relpath(key: str) -> PurePosixPath:
    """A remote key as a relative path that cannot leave the cache folder."""
    if not key or "\x00" in key:
        raise PullError(f"refusing object key {key!r}: empty or contains NUL")
    if key.startswith(("/", "\\")) or re.match(r"^[A-Za-z]:", key) or "\\" in key:
        raise PullError(f"refusing object key {key!r}: absolute path or drive letter")
    parts = PurePosixPath(key).parts
    if any(p in ("..", ".") for p in parts):
        raise PullError(f"refusing object key {key!r}: it climbs out of the cache folder")
    return PurePosixPath(*parts)


class PullCache:
    """The cache folder of one source (bucket, container, table) and what was fetched into it."""

    def __init__(self, root: Path, source: str):
        self.root = root
        self.source = source
        self.root.mkdir(parents=True, exist_ok=True)
        self._state_path = self.root / STATE_FILE
        try:
            self.state: dict[str, dict[str, Any]] = json.loads(self._state_path.read_text())
        except (OSError, ValueError):
            self.state = {}

    def path_for(self, key: str) -> Path:
        rel = safe_relpath(key)
        path = (self.root / rel).resolve()
        if not path.is_relative_to(self.root.resolve()):
            raise PullError(f"refusing object key {key!r}: it resolves outside the cache folder")
        return path

    def unchanged(self, obj: RemoteObject) -> bool:
        rec = self.state.get(obj.state_id(self.source))
        path = self.path_for(obj.key)
        return bool(rec and rec.get("etag") == obj.etag and rec.get("size") == obj.size
                    and path.exists() and path.stat().st_size == obj.size)

    def record(self, obj: RemoteObject) -> None:
        self.state[obj.state_id(self.source)] = {"etag": obj.etag, "size": obj.size, "key": obj.key,
                                                 "fetched_at": time.time()}
        tmp = self._state_path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.state, indent=1, sort_keys=True))
        os.replace(tmp, self._state_path)


def with_retries(fn: Callable[[], T], *, attempts: int = 5, base_delay: float = 0.2,
                 sleep: Callable[[float], None] = time.sleep) -> T:
    """Call fn, retrying RetryableError with exponential backoff and jitter."""
    for i in range(attempts):
        try:
            return fn()
        except RetryableError:
            if i == attempts - 1:
                raise
            sleep(base_delay * (2 ** i) * (0.5 + random.random()))
    raise AssertionError("unreachable")


def download(
    obj: RemoteObject,
    dest: Path,
    read_from: Callable[[int], Iterable[bytes]],
    *,
    progress: Callable[[int], None] | None = None,
    attempts: int = 5,
) -> None:
    """Download to dest through dest.part, resuming from what .part already holds.

    ``read_from(offset)`` yields the object's bytes from offset (a ranged GET); it raises
    RetryableError on throttling, 5xx or a dropped connection.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(dest.name + ".part")

    def attempt() -> None:
        offset = part.stat().st_size if part.exists() else 0
        if offset > obj.size:
            part.unlink()
            offset = 0
        if offset < obj.size or obj.size == 0:
            with open(part, "ab") as f:
                try:
                    for chunk in read_from(offset):
                        f.write(chunk)
                        if progress:
                            progress(len(chunk))
                except (ConnectionError, TimeoutError, OSError) as e:
                    raise RetryableError(str(e)) from e
        got = part.stat().st_size
        if got != obj.size:
            raise RetryableError(f"{obj.key}: got {got} of {obj.size} bytes")

    with_retries(attempt, attempts=attempts)
    os.replace(part, dest)


def chunks(stream: Any, size: int = 1 << 20) -> Iterator[bytes]:
    """Read a file-like stream in chunks."""
    while True:
        b = stream.read(size)
        if not b:
            return
        yield b


def describe_plan(deliveries: list[PlannedDelivery], cache: PullCache) -> list[str]:
    """Lines for --dry-run: what would be fetched and how big it is."""
    out = []
    for d in deliveries:
        new = [o for o in d.objects if not cache.unchanged(o)]
        out.append(f"{d.period}  {d.label}: {len(d.objects)} object(s), {d.size:,} bytes; "
                   f"{len(new)} to fetch ({sum(o.size for o in new):,} bytes)")
        for o in d.objects:
            out.append(f"    {'fetch ' if o in new else 'cached'} {o.key} ({o.size:,} bytes)")
    return out
