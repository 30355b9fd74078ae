"""billing-audit: find what interrupted spot GPU training really costs in cloud bills.

>>> import billing_audit
>>> store = billing_audit.open("billing-audit.duckdb")          # doctest: +SKIP
>>> report = store.ingest(["fixtures/"])                         # doctest: +SKIP
>>> store.summary()                                              # doctest: +SKIP
"""

from __future__ import annotations

from billing_audit.store import IngestReport, Store, open

__all__ = ["IngestReport", "Store", "open"]
__version__ = "0.1.0"
