"""Synthetic billing exports at scale, in each provider's real format and layout (tests and benchmarks).

Each connector that can write its exports has a ``synthetic`` part; this module finds it by name and
loads it only when asked, so no ingest pays for the generator.

>>> from billing_audit.generate import generate
>>> files = generate("aws", 10_000, "/tmp/estate", seed=0)      # doctest: +SKIP
"""

from __future__ import annotations

from pathlib import Path

from billing_audit import registry
from billing_audit.errors import BillingAuditError


def providers() -> tuple[str, ...]:
    """The connectors that can write synthetic exports."""
    return registry.with_part("synthetic")


def generate(provider: str, rows: int, out_dir: str | Path, seed: int = 0, rows_per_file: int | None = None) -> list[Path]:
    """Write ``rows`` synthetic line items of October 2026 for ``provider`` under ``out_dir``.

    Returns the data files written (parquet or CSV), in order.  ``rows_per_file`` caps a part's
    size (default: the provider's own, e.g. 2M for AWS and GCP, 1M for Azure); parts are of near-equal size.
    """
    if provider not in providers():
        raise BillingAuditError(f"unknown provider {provider!r}: expected one of {', '.join(providers())}")
    files: list[Path] = registry.part(provider, "synthetic").generate(rows, out_dir, seed=seed, rows_per_file=rows_per_file)
    return files
