"""billing-audit: find what interrupted spot GPU training really costs in cloud bills.

The Python API (README "Python API"; :mod:`billing_audit.api`): :func:`open` gives a store with every
command as a method, returning polars frames or dataclasses, the same answers as the command line.

>>> import billing_audit
>>> store = billing_audit.open("billing-audit.duckdb")          # doctest: +SKIP
>>> report = store.ingest(["fixtures/"])                         # doctest: +SKIP
>>> store.tag().hits                                             # doctest: +SKIP
>>> store.report(period="2026-10").jobs                          # doctest: +SKIP
>>> store.summary()                                              # doctest: +SKIP

Importing the package imports nothing else: the names below are loaded when first used (PEP 562), so
``billing-audit --help`` starts without DuckDB or polars.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from billing_audit.api import Audit
    from billing_audit.store import IngestReport, Store

__all__ = ["Audit", "IngestReport", "Store", "open"]
__version__ = "0.1.0"

_LAZY = {"Audit": "billing_audit.api", "IngestReport": "billing_audit.store", "Store": "billing_audit.store"}


def open(db: str | os.PathLike[str] | None = None, *, read_only: bool = False,  # noqa: A001
         wait: float | None = None, on_wait: Callable[[str], None] | None = None) -> Audit:
    """Open (or, unless ``read_only``, create) the store at ``db``: :func:`billing_audit.api.open`.
    The API module (and the app layer under it) is imported on the first call, not with the package."""
    from billing_audit.api import open as open_api

    return open_api(db, read_only=read_only, wait=wait, on_wait=on_wait)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value  # once: later lookups do not come here
        return value
    raise AttributeError(f"module 'billing_audit' has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted({*globals(), *_LAZY})
