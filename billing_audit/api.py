"""The Python API: ``billing_audit.open()`` gives a store with every command as a method.

A thin facade over :mod:`billing_audit.app` (the functions the command line calls), so a notebook gets the
same answers as ``billing-audit``: polars frames or the app's dataclasses, money as Decimal per currency.
The store stays open between calls (the app functions use it instead of opening the file again); close it
with ``close()`` or a ``with`` block.  Readers (``read_only=True``) open side by side with other readers.

>>> import billing_audit
>>> store = billing_audit.open("demo.duckdb")                    # doctest: +SKIP
>>> store.ingest(["fixtures/"]).rows                             # doctest: +SKIP
>>> store.tag().hits                                             # doctest: +SKIP
>>> store.report(period="2026-10").jobs                          # doctest: +SKIP
>>> store.search("spot restart").totals                          # doctest: +SKIP

It is a :class:`billing_audit.store.Store`, so ``store.con`` (the DuckDB connection) and ``store.sql()``
are there for anything else.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence
from contextlib import nullcontext
from datetime import date
from pathlib import Path
from typing import TYPE_CHECKING, Any

from billing_audit import app
from billing_audit.errors import BillingAuditError
from billing_audit.store import IngestReport, Progress, Store

if TYPE_CHECKING:
    import polars as pl

    from billing_audit.deliveries import OverlapPolicy
    from billing_audit.report import Report
    from billing_audit.rules import Rule
    from billing_audit.search import SearchResult
    from billing_audit.validate import FileValidation


class Audit(Store):
    """A billing-audit store with the commands as methods (see the module doc; README "Python API").

    >>> with billing_audit.open("demo.duckdb", read_only=True) as store:   # doctest: +SKIP
    ...     store.summary(period="2026-10")
    """

    def _writable(self, what: str) -> None:
        if self.read_only:
            raise BillingAuditError(f"{self.path} is open read-only: {what} writes the store; "
                                    "billing_audit.open(db) without read_only=True")

    # -- what the store holds ---------------------------------------------------------------------------------
    def ingest(self, paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str],
               progress: Progress | None = None, overlap: OverlapPolicy | None = None, *,
               config: str | None = None, follow_outside: bool = False) -> IngestReport:
        """Load export files or folders (`billing-audit ingest`); a bad file is in the result's ``errors``.

        >>> store.ingest(["fixtures/aws"]).rows                  # doctest: +SKIP
        """
        self._writable("ingest")
        files = [paths] if isinstance(paths, str | os.PathLike) else list(paths)
        if overlap is None:  # as the CLI: the config's [exports] table (./billing-audit.toml when present)
            from billing_audit.config import load_config

            overlap = load_config(config).overlap_policy()
        return super().ingest(files, progress=progress, overlap=overlap, follow_outside=follow_outside)

    def summary(self, period: str | None = None, provider: str | None = None) -> pl.DataFrame:
        """Lines and cost per provider, billing period and currency (`billing-audit summary`'s first table).

        >>> store.summary(period="2026-10", provider="aws")     # doctest: +SKIP
        """
        if period is None and provider is None:
            return super().summary()
        return app.summary(self, period, provider)

    def summary_report(self, period: str | None = None, provider: str | None = None) -> app.Summary:
        """All of `billing-audit summary`: per period, totals per currency, the data's as-of time, owners.

        >>> store.summary_report().as_of                         # doctest: +SKIP
        """
        return app.summary_report(self, period, provider)

    def owners(self, period: str | None = None, provider: str | None = None) -> pl.DataFrame:
        """Which export's delivery holds each provider, billing account and period (`summary --exports`)."""
        if period is None and provider is None:
            return super().owners()
        return app.owners(self, period, provider)

    def explain(self, line_item_id: str, *, config: str | None = None) -> app.Explanation:  # type: ignore[override]
        """One line item, every rule that matched it, and where the report (with ``config``) puts it: job, team
        and what gave them, category, restart window (`billing-audit explain`); ``line, hits = ...`` unpacks.

        >>> store.explain("aws-96bc1426b7e8-13").window["linked"]   # doctest: +SKIP
        """
        return app.explain(self, line_item_id, config)

    # -- rules --------------------------------------------------------------------------------------------------
    def tag(self, rules: Sequence[Rule] | None = None, params: dict[str, Any] | Sequence[str] | None = None,
            checkpoint: dict[str, Any] | None = None, *, rule_dirs: Sequence[str | Path] = (),
            select: Sequence[str] = (), exclude: Sequence[str] = (), config: str | None = None,
            force: bool = False) -> Any:
        """Run the rules and store their hits (`billing-audit tag`): the built-in pack plus ``rule_dirs``,
        narrowed by ``select`` / ``exclude``; ``params`` as NAME=VALUE strings or typed values; the
        checkpoint tags from the config, as the CLI does.  The result has ``hits``, ``hits_by_rule``, ``run_id``,
        ``scans`` and ``failed`` (user rules that failed and were skipped); ``unchanged`` when nothing changed
        since the last tag run, so nothing was redone (``force`` re-tags all the same).

        >>> store.tag(select=["restart_fee"]).hits_by_rule       # doctest: +SKIP
        """
        self._writable("tag")
        if rules is None:
            rules = app.load_rules(rule_dirs).select(list(select), list(exclude))
        if params is not None and not isinstance(params, dict):
            params = app.typed_params(rules, app.parse_params(params))
        if checkpoint is None:
            from billing_audit.config import load_config

            checkpoint = load_config(config).checkpoint_settings()
        return super().tag(rules, params, checkpoint, force=force)

    # -- the report ---------------------------------------------------------------------------------------------
    def report(self, period: str | None = None, *, basis: str = "effective", config: str | None = None) -> Report:
        """Interruption overhead per job and team (`billing-audit report`): ``.jobs``, ``.teams``, ``.totals``
        are polars frames (money Decimal), ``.warnings`` what the report cannot vouch for.

        >>> store.report(period="2026-10").totals                # doctest: +SKIP
        """
        return app.report(self, config, period, basis).report

    def export(self, out: str | Path | None = None, *, by: str = "team", fmt: str = "csv", period: str | None = None,
               basis: str = "effective", config: str | None = None, bom: bool = False) -> pl.DataFrame:
        """The finance file's rows (`billing-audit export`), written to ``out`` when given (csv, parquet, json;
        ``bom``: CSV starts with a UTF-8 byte order mark).

        >>> store.export("surcharges.csv", by="team", period="2026-10")   # doctest: +SKIP
        """
        from billing_audit import inert

        with inert.csv_bom(bom) if bom else nullcontext():
            return app.export(self, out, by, fmt, config, period, basis)

    def audit(self, paths: Sequence[str | Path], out_dir: str | Path = "audit-report", *, period: str | None = None,
              basis: str = "effective", config: str | None = None) -> app.AuditResult:
        """The monthly audit (`billing-audit audit`): ingest, tag, report, write the four files to ``out_dir``."""
        self._writable("audit")
        return app.audit(self, paths, out_dir, config, period, basis)

    # -- looking into the bills ---------------------------------------------------------------------------------
    def search(self, query: str, *, period: str | None = None, since: str | date | None = None,
               provider: str | None = None, limit: int | None = 50, lines: bool = False,
               exact: bool = False) -> SearchResult:
        """Search the bills for words with word families (`billing-audit search`): ``.groups``, ``.totals``
        (and ``.lines``) are polars frames; ``.left_out()`` says what ``limit`` did not list.

        >>> store.search("egress", provider="azure").totals      # doctest: +SKIP
        """
        return app.search(self, query, period=period, since=since, provider=provider, limit=limit, lines=lines,
                          exact=exact).result

    @staticmethod
    def validate(paths: Sequence[str | Path]) -> list[FileValidation]:
        """Describe and check export files without touching any store (`billing-audit validate`).

        >>> [f.status for f in store.validate(["fixtures/azure"])]   # doctest: +SKIP
        """
        return app.validate(paths)

    @property
    def prices(self) -> Prices:
        """The `prices` command group on this store: ``prices.ingest(paths)``, ``prices.pull(provider, **options)``,
        ``prices.list()`` and ``prices.needs(provider)``."""
        return Prices(self)


class Prices:
    """Price references of one open store (`billing-audit prices ...`), the same functions as the CLI's."""

    def __init__(self, store: Audit) -> None:
        self._store = store

    def ingest(self, paths: Iterable[str | os.PathLike[str]] | str | os.PathLike[str]) -> Any:
        """Load price-reference files or folders (`prices ingest`); returns what loading them did."""
        self._store._writable("prices.ingest")
        items = [paths] if isinstance(paths, (str, os.PathLike)) else list(paths)
        return app.prices_ingest(self._store, [Path(p) for p in items])

    def pull(self, provider: str, **options: Any) -> Any:
        """Fetch what the spot lines of ``provider`` need and load it (`prices pull <provider>`)."""
        from billing_audit import registry

        self._store._writable("prices.pull")
        puller = registry.part(provider, "prices_pull").PULLER
        return app.prices_pull(self._store, provider, puller.Options(**options), puller=puller)

    def list(self) -> Any:
        """The references held and the coverage of the spot lines (`prices list`)."""
        return app.prices_list(self._store)

    def needs(self, provider: str | None = None) -> Any:
        """The on-demand prices the spot lines still need."""
        return app.prices_needs(self._store, provider)


def open(db: str | os.PathLike[str] | None = None, *, read_only: bool = False,  # noqa: A001
         wait: float | None = None, on_wait: Callable[[str], None] | None = None) -> Audit:
    """Open (or, unless ``read_only``, create) the store at ``db`` (default $BILLING_AUDIT_DB, then
    billing-audit.duckdb).  ``read_only``: no store there is an error, and other readers may hold it too;
    ``wait``: seconds to wait for another process to close it (default $BILLING_AUDIT_LOCK_TIMEOUT, 10).

    >>> with billing_audit.open("demo.duckdb", read_only=True) as store:   # doctest: +SKIP
    ...     print(store.summary())
    """
    return Audit(db, read_only=read_only, wait=wait, on_wait=on_wait)


__all__ = ["Audit", "Prices", "open"]
