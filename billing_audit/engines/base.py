"""What every engine is: a name, its own options, what a run reads, and the run.

An engine runs the whole audit (rules, attribution, aggregation: :mod:`billing_audit.engines.pipeline`)
where the lines are and returns only the aggregates; :func:`billing_audit.engines.run_engine` stores
them.  Engines are found by name (:mod:`billing_audit.engines`): DuckDB is built in, the others are
entry points of the group ``billing_audit.engines`` (``connectors.spark.engine:SparkEngine``, ...),
imported when first asked for.

Each engine's ``Options`` (an :class:`EngineOptions`) is a pydantic model whose fields carry their command-line flag, metavar
and help (``Field(..., description=..., json_schema_extra={"flag": ..., "metavar": ...})``), so a command
line can be generated from the models (:func:`billing_audit.engines.option_specs`).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict

from billing_audit.config import Config

if TYPE_CHECKING:
    from billing_audit.rules import Rule
    from billing_audit.store import Store


class EngineOptions(BaseModel):
    """An engine's settings (none for DuckDB); each engine subclasses it with its own fields."""

    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class EngineRunResult:
    """What a run gave: the result rows (``pipeline.RESULT_COLUMNS`` order), the SQL it ran, the bytes the
    engine says it processed (None when it does not say) and what it read (matched when reusing a run)."""

    rows: list[tuple[Any, ...]]
    sql: str
    bytes_processed: int | None
    source: str


class Engine(ABC):
    """One place the audit can run."""

    name: ClassVar[str]
    Options: ClassVar[type[EngineOptions]] = EngineOptions

    def reads_store(self, options: Any) -> bool:
        """Whether a run reads the local store's lines (then a missing store is an error, not an empty result);
        a warehouse engine reads the provider's table and only keeps its aggregates in the store."""
        return False

    def reads_paths(self, options: Any) -> bool:
        """Whether a run reads the export files named to ``audit`` itself (then ``audit`` does not ingest them
        locally but hands them to :meth:`with_paths`)."""
        return False

    def with_paths(self, options: Any, paths: Sequence[Any]) -> Any:
        """The options with the export paths ``audit`` was given (engines whose :meth:`reads_paths`)."""
        return options

    def dry_run(self, options: Any) -> str | None:
        """What a run with these options would read, in words, without running the audit (None: the engine
        has no dry run for these options)."""
        return None

    @abstractmethod
    def source(self, store: Store, options: Any) -> str | None:
        """What a run with these options reads (None when the options do not say yet)."""

    @abstractmethod
    def run(self, store: Store, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
            params: dict[str, Any], checkpoint: dict[str, Any] | None, options: Any) -> EngineRunResult:
        """Run the audit; a rule that cannot run here raises ``pipeline.RuleNotPortable`` before any work."""
