"""DuckDB: the audit's one query on the store itself (the default engine, what the others are tested against)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from billing_audit.config import Config
from billing_audit.engines.base import Engine, EngineOptions, EngineRunResult
from billing_audit.rules import Rule

if TYPE_CHECKING:
    from billing_audit.store import Store


class DuckDBEngine(Engine):
    name = "duckdb"
    Options = EngineOptions  # nothing to set: it runs where the store is

    def reads_store(self, options: Any) -> bool:
        return True

    def source(self, store: Store, options: Any) -> str:
        return str(store.path)

    def run(self, store: Store, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
            params: dict[str, Any], checkpoint: dict[str, Any] | None, options: Any) -> EngineRunResult:
        from billing_audit.engines import pipeline

        sql = pipeline.engine_sql("duckdb", rules, cfg, period, basis, params, checkpoint)
        rows = [tuple(r) for r in store.con.execute(sql).fetchall()]
        return EngineRunResult(rows, sql, None, self.source(store, options))
