"""What the ``pull <cloud>-events`` commands share: the date window, the plan, the fetch and the ingest.

Interruption event logs land in object stores under date folders (README, "Interruption events"): Firehose's
``YYYY/MM/DD/HH/`` (the arrival of the object's oldest record), CloudTrail's ``.../YYYY/MM/DD/`` with the
delivery minute in the file name, the Activity Log's ``y=YYYY/m=MM/d=DD/h=HH/m=00/PT1H.json`` (the hour of the
records), a log sink's ``<log>/YYYY/MM/DD/HH:00:00_HH:59:59_S0.json``.  A pull lists the prefix, keeps the
objects whose date folder falls in the asked period (widened by the provider's delivery lag), downloads what
changed into the cache under the remote key (:mod:`connectors.pull_common`: ETag and size, ``.part`` resume) and
reads the files as events (:func:`billing_audit.events.ingest_pulled`: exactly once, each named by its key; a
file the store read before, unchanged, is not read again).  An object with no date in its key (a CloudWatch Logs
export's ``000000.gz``) cannot be placed in a period: it is fetched whatever the period, and said.

Each provider's ``events_pull`` part gives a :class:`Remote` (listing and download through its SDK) and its
``Options``; :class:`EventPuller` is the rest of the :class:`billing_audit.pulling.Puller`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from datetime import date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

from billing_audit import pulling
from connectors.pull_common import PullCache, PullError, RemoteObject

if TYPE_CHECKING:
    from billing_audit.store import IngestReport, Store

_PERIOD = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
_DAY = re.compile(r"^\d{4}-\d{2}-\d{2}$")
# date folders, deepest (last) match wins: YYYY/MM/DD[/HH], y=YYYY/m=MM/d=DD[/h=HH], year=/month=/day=[/hour=], dt=YYYY-MM-DD
_SLASHED = re.compile(r"(?:^|/)(\d{4})/(\d{2})/(\d{2})/(?:(\d{2})/)?")
_HIVE = re.compile(r"(?:^|/)y(?:ear)?=(\d{4})/m(?:onth)?=(\d{1,2})/d(?:ay)?=(\d{1,2})/(?:h(?:our)?=(\d{1,2})/)?")
_DT = re.compile(r"(?:^|/)dt=(\d{4})-(\d{2})-(\d{2})/")
_SINK_HOUR = re.compile(r"^(\d{2}):00:00_\d{2}:59:59_")  # a log sink's hourly file name
_TRAIL_MINUTE = re.compile(r"_(\d{4})(\d{2})(\d{2})T(\d{2})(\d{2})Z_")  # a CloudTrail file name's delivery minute


class Fatal(PullError):
    """Stops the whole pull (credentials, access denied, no such bucket), not just one object."""


# -- the window --------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class Window:
    """The times asked for: ``spans`` of [start, end) in UTC (none: everything)."""

    spans: tuple[tuple[datetime, datetime], ...] = ()
    words: str = "every date"

    def covers(self, start: datetime, length: timedelta, lag: timedelta) -> bool:
        """Whether an object dated [start, start + length) may hold events of the window (``lag`` either side)."""
        return not self.spans or any(start < hi + lag and start + length + lag > lo for lo, hi in self.spans)


def window(periods: Iterable[str] = (), since: str | None = None, *, today: date | None = None) -> Window:
    """--period YYYY-MM (repeatable) or --since YYYY-MM-DD (to now); neither: every date.  Errors as every command
    spells them."""
    periods = list(dict.fromkeys(periods))
    if periods and since:
        raise PullError("give --period or --since, not both")
    spans = []
    for p in periods:
        m = _PERIOD.match(p.strip())
        if not m:
            raise PullError(f"--period {p!r}: expected YYYY-MM, e.g. 2026-10")
        y, mo = int(m.group(1)), int(m.group(2))
        spans.append((datetime(y, mo, 1), datetime(y + (mo == 12), mo % 12 + 1, 1)))
    if periods:
        return Window(tuple(sorted(spans)), ", ".join(sorted(periods)))
    if since:
        try:
            if not _DAY.match(since):
                raise ValueError
            d = date.fromisoformat(since)
        except ValueError:
            raise PullError(f"--since {since!r}: expected YYYY-MM-DD, e.g. 2026-10-01") from None
        return Window(((datetime(d.year, d.month, d.day), datetime.max - timedelta(days=2)),), f"since {since}")
    return Window()


def date_of(key: str) -> tuple[datetime, timedelta] | None:
    """The time span a key's date folder names (a day, or an hour), from its deepest date folder; None: no date."""
    folder, _, name = key.rpartition("/")
    folder += "/"
    best: tuple[int, tuple[str | None, ...]] | None = None
    for rx in (_SLASHED, _HIVE, _DT):
        for m in rx.finditer(folder):
            if best is None or m.end() > best[0]:
                best = (m.end(), m.groups())
    if best is None:
        return None
    y, mo, d, *rest = best[1]
    h = rest[0] if rest else None
    try:
        day = datetime(int(str(y)), int(str(mo)), int(str(d)))
    except ValueError:
        return None
    if h is None and best[0] == len(folder):  # a day folder: the file name may say the hour or minute
        if sink := _SINK_HOUR.match(name):
            h = sink.group(1)
        elif (trail := _TRAIL_MINUTE.search(name)) and tuple(map(int, trail.groups()[:3])) == (day.year, day.month, day.day):
            return day + timedelta(hours=int(trail.group(4)), minutes=int(trail.group(5))), timedelta(minutes=1)
    if h is not None and 0 <= int(h) <= 23:
        return day + timedelta(hours=int(h)), timedelta(hours=1)
    return day, timedelta(days=1)


# -- a provider's object store -----------------------------------------------------------------------------------
class Remote(Protocol):
    """One bucket / container and prefix, through the provider's SDK."""

    @property
    def source(self) -> str:
        """The cache state's source id, e.g. ``s3://bucket``."""

    def describe(self) -> str:
        """Where, in words: ``s3://bucket/prefix``."""

    def uri(self, key: str) -> str:
        """How an object is named in the store and in errors: ``s3://bucket/key``."""

    def list(self) -> list[RemoteObject]:
        """Every object under the prefix (raises :class:`Fatal` when the listing is refused)."""

    def fetch(self, obj: RemoteObject, dest: Path, progress: Callable[[int], None] | None) -> None:
        """Download ``obj`` to ``dest`` (resuming ``dest.part``); PullError for this object, Fatal for the pull."""


@dataclass
class Layout:
    """What a provider's sink layout says beyond the dates."""

    lag: timedelta = timedelta(0)  # how far an object's date may be from its events' times
    lag_words: str = ""
    skip: Callable[[str], str | None] = lambda key: None  # a known non-event object of the layout: why it is left out
    undated_words: str = "objects with no date folder in their key"


# -- the plan ----------------------------------------------------------------------------------------------------
@dataclass
class EventPlan:
    remote: Remote
    cache: PullCache
    window: Window
    layout: Layout
    objects: list[RemoteObject] = field(default_factory=list)  # to bring into the cache (in the window, or undated)
    outside: int = 0  # listed, dated outside the window: not fetched
    undated: list[str] = field(default_factory=list)
    skipped: dict[str, int] = field(default_factory=dict)  # why -> how many
    messages: list[pulling.Message] = field(default_factory=list)

    @property
    def size(self) -> int:
        return sum(o.size for o in self.objects)

    def dry_run(self) -> pulling.DryRun:
        new = [o for o in self.objects if not self.cache.unchanged(o)]
        lines = [f"{self.remote.describe()}, {self.window.words}: {len(self.objects)} object(s), {self.size:,} bytes; "
                 f"{len(new)} to fetch ({sum(o.size for o in new):,} bytes)"
                 + (f"; {self.outside} dated outside it not fetched" if self.outside else "")]
        lines += [f"    {'fetch ' if o in new else 'cached'} {o.key} ({o.size:,} bytes)" for o in self.objects]
        return pulling.DryRun(lines)


def plan(remote: Remote, cache: PullCache, win: Window, layout: Layout) -> EventPlan:
    """List the prefix and choose the objects of the window (every object when no window was asked for)."""
    p = EventPlan(remote, cache, win, layout)
    listed = remote.list()
    if not listed:
        raise PullError(f"nothing under {remote.describe()}: check the bucket / container and --prefix")
    for obj in sorted(listed, key=lambda o: o.key):
        if obj.key.endswith("/"):
            continue  # a folder marker
        why = layout.skip(obj.key)
        if why is not None:
            p.skipped[why] = p.skipped.get(why, 0) + 1
            continue
        cache.path_for(obj.key)  # refuses ../, absolute keys, drive letters before anything is fetched
        dated = date_of(obj.key)
        if dated is None:
            p.undated.append(obj.key)
            p.objects.append(obj)
        elif win.covers(dated[0], dated[1], layout.lag):
            p.objects.append(obj)
        else:
            p.outside += 1
    for why, n in sorted(p.skipped.items()):
        p.messages.append(pulling.info(f"{n} object(s) left out: {why}"))
    if p.undated and win.spans:
        p.messages.append(pulling.note(
            f"{len(p.undated)} object(s) have no date in their key ({layout.undated_words}, e.g. {p.undated[0]}): "
            f"fetched whatever the period; their events are stored once like any other"))
    if win.spans and layout.lag and p.objects:
        p.messages.append(pulling.info(f"{win.words}: objects dated up to {layout.lag_words} either side are "
                                       "fetched too (delivery lag)"))
    if not p.objects:
        p.messages.append(pulling.info(f"nothing to pull under {remote.describe()} for {win.words}"
                                       + (f" ({p.outside} object(s) dated outside it)" if p.outside else "")))
    return p


# -- the fetch ---------------------------------------------------------------------------------------------------
@dataclass
class EventFetched:
    files: list[tuple[Path, str]] = field(default_factory=list)  # (local file, remote name) to read as events
    messages: list[pulling.Message] = field(default_factory=list)
    failed: bool = False
    error: str | None = None

    @property
    def ready(self) -> bool:
        return bool(self.files)


def fetch(p: EventPlan, progress: pulling.FetchProgress | None) -> EventFetched:
    """Download what changed; an object that cannot be fetched is an error said by key (the others still ingest)."""
    out = EventFetched()
    if progress is not None and p.objects:
        progress.start(f"pull {p.remote.describe()}", p.size, "bytes")
    downloaded = cached = nbytes = 0
    for i, obj in enumerate(p.objects, start=1):
        if progress is not None:
            progress.detail(f"{i}/{len(p.objects)} files")
        dest = p.cache.path_for(obj.key)
        if p.cache.unchanged(obj):
            cached += 1
            if progress is not None:
                progress.advance(obj.size)
        else:
            try:
                p.remote.fetch(obj, dest, progress.advance if progress is not None else None)
            except Fatal:
                raise
            except PullError as e:
                out.messages.append(pulling.error(f"{p.remote.uri(obj.key)}: {e}"))
                out.failed = True
                continue
            p.cache.record(obj)
            downloaded += 1
            nbytes += obj.size
        out.files.append((dest, p.remote.uri(obj.key)))
    out.messages.insert(0, pulling.info(f"{p.remote.describe()}: {downloaded} object(s) downloaded ({nbytes:,} bytes), "
                                        f"{cached} unchanged in the cache"))
    return out


# -- the puller --------------------------------------------------------------------------------------------------
class EventOptions(pulling.PullOptions, Protocol):
    """An event puller's options: every pull's (cache, dry run, quiet), and the dates to fetch."""

    @property
    def periods(self) -> tuple[str, ...]: ...
    @property
    def since(self) -> str | None: ...


class EventPuller:
    """A ``pull <cloud>-events`` command: the provider gives :meth:`open` (its remote and layout)."""

    name: str
    title: str
    example: str
    help: str
    Options: Any
    db_before = "cache"

    def open(self, options: Any) -> tuple[Remote, Path, Layout]:  # pragma: no cover - each provider's
        """The remote, its cache folder and its layout."""
        raise NotImplementedError

    def plan(self, options: Any) -> EventPlan:
        win = window(options.periods, options.since)  # before any request
        remote, root, layout = self.open(options)
        return plan(remote, PullCache(root, remote.source), win, layout)

    def fetch(self, p: EventPlan, progress: pulling.FetchProgress | None) -> EventFetched:
        return fetch(p, progress)

    def ingest(self, store: Store, fetched: EventFetched, progress: pulling.IngestProgress | None) -> IngestReport:
        from billing_audit import events

        return events.ingest_pulled(store, fetched.files)

