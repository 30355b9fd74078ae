"""What a connector's ``pull`` part gives the core: its flags, its help, and three steps the app layer drives.

A connector that can fetch its exports from the cloud has a ``pull`` submodule (``connectors/<name>/pull.py``)
with a ``PULLER`` object satisfying :class:`Puller`: the core finds it through the registry and never names a
provider.  One that can fetch its interruption event logs has an ``events_pull`` submodule with another
``PULLER``, the subcommand ``pull <name>-events``.  The CLI builds ``billing-audit pull <name>`` from ``PULLER.help`` and the fields of ``PULLER.Options``
(a pydantic model; each field's flag, metavar and help are its ``Field`` metadata), and
:func:`billing_audit.app.pull` runs the steps:

1. ``plan(options)``: check the options, find the exports, choose what to fetch (per billing period, the newest
   complete delivery); ``plan.messages`` are said right away, ``plan.dry_run()`` is what ``--dry-run`` shows;
2. ``fetch(plan, progress)``: download what changed into the cache (``progress`` draws bars when given);
   ``fetched.messages`` are said after it;
3. ``ingest(store, fetched, progress)``: hand the fetched files to ``Store.ingest``, when ``fetched.ready``.

Nothing here prints.  A connector raises :class:`~billing_audit.errors.BillingAuditError` (its ``PullError``)
for what stops the pull; what stops one delivery is a message, and ``fetched.failed`` / ``fetched.error``
decide the exit code after the ingest.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, Protocol, TypeVar, cast

from pydantic import BaseModel

if TYPE_CHECKING:
    from billing_audit.store import IngestReport, Store

Level = Literal["info", "note", "error"]
IngestProgress = Callable[[str, int], None]


@dataclass(frozen=True)
class Message:
    """A line for the user (stderr): ``info`` is left out by --quiet; ``note`` and ``error`` never are."""

    text: str
    level: Level = "info"

    def __str__(self) -> str:
        return self.text if self.level == "info" else f"{self.level}: {self.text}"


def info(text: str) -> Message:
    return Message(text, "info")


def note(text: str) -> Message:
    return Message(text, "note")


def error(text: str) -> Message:
    return Message(text, "error")


@dataclass
class DryRun:
    """What --dry-run shows: ``lines`` on stdout, then ``messages`` on stderr; ``failed`` exits 2."""

    lines: list[str] = field(default_factory=list)
    messages: list[Message] = field(default_factory=list)
    failed: bool = False


class PullOptions(Protocol):
    """The fields every connector's ``Options`` model has (with its own help and default cache folder)."""

    @property
    def cache(self) -> str: ...
    @property
    def dry_run(self) -> bool: ...
    @property
    def quiet(self) -> bool: ...


class PullPlan(Protocol):
    @property
    def messages(self) -> list[Message]:
        """Said once the plan is made (notes, "nothing to pull")."""

    def dry_run(self) -> DryRun:
        """What would be fetched and its size (may ask the cloud, e.g. BigQuery's dry-run queries)."""


class Fetched(Protocol):
    @property
    def messages(self) -> list[Message]:
        """Said after the fetch, before the ingest (what was downloaded, what could not be)."""

    @property
    def ready(self) -> bool:
        """Whether there is anything to ingest."""

    @property
    def failed(self) -> bool:
        """Some delivery could not be fetched (already said): the pull exits 2 after the ingest."""

    @property
    def error(self) -> str | None:
        """The error the pull fails with after the ingest (one line), if any."""


class FetchProgress(Protocol):
    """Progress bars for the fetch: ``start`` one per download (bytes) or query result (rows)."""

    def start(self, label: str, total: int | None, unit: str = "bytes") -> None: ...
    def advance(self, n: int) -> None: ...
    def detail(self, text: str) -> None: ...


OptionsT = TypeVar("OptionsT", bound=BaseModel)
PlanT = TypeVar("PlanT", bound=PullPlan)
FetchedT = TypeVar("FetchedT", bound=Fetched)


class Puller(Protocol[OptionsT, PlanT, FetchedT]):
    """A connector's pull: its ``--help`` text, its options model and the three steps."""

    name: str  # the subcommand: `billing-audit pull <name>`
    title: str  # how the cloud is called in `pull --help`, e.g. "AWS"
    example: str  # one command line for `pull --help`
    help: str  # the command's help: what it fetches, authentication, permissions, examples
    Options: type[OptionsT]  # the command's flags (besides the shared --db)
    db_before: str  # the field the shared --db option is listed before in --help

    def plan(self, options: OptionsT) -> PlanT: ...
    def fetch(self, plan: PlanT, progress: FetchProgress | None) -> FetchedT: ...
    def ingest(self, store: Store, fetched: FetchedT, progress: IngestProgress | None) -> IngestReport: ...


AnyPuller = Puller[Any, Any, Any]


EVENTS = "-events"  # `pull <name>-events`: a connector's ``events_pull`` part (its interruption event logs)


def names() -> tuple[str, ...]:
    """The pull subcommands, sorted: each connector with a ``pull`` part (its exports) by its name, and each with
    an ``events_pull`` part (its interruption event logs) as ``<name>-events`` (the parts are not imported)."""
    from billing_audit import registry

    return tuple(sorted((*registry.with_part("pull"), *(n + EVENTS for n in registry.with_part("events_pull")))))


def puller(name: str) -> AnyPuller:
    """Subcommand ``name``'s puller (imports the part; the cloud SDK stays unloaded until it runs)."""
    from billing_audit import registry

    if name.endswith(EVENTS) and name not in registry.names():
        return cast(AnyPuller, registry.part(name.removesuffix(EVENTS), "events_pull").PULLER)
    return cast(AnyPuller, registry.part(name, "pull").PULLER)
