"""Temporary: the ingest the pullcmd modules share (removed with them)."""

from __future__ import annotations

from billing_audit import app
from billing_audit.cli.console import Bars, err
from billing_audit.store import IngestReport


def _run_ingest(db: str, paths: tuple[str, ...], quiet: bool) -> IngestReport:
    with Bars() as bars:
        return app.ingest(db, paths, progress=bars.ingest if not quiet and err.is_terminal else None)
