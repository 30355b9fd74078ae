"""The JSON documents the commands write: one envelope and one representation of each kind of value.

Every JSON document (``summary``, ``search``, ``rules list|show``, ``validate``, ``explain``, and the report
through :func:`envelope`) is an object that starts with::

    {"schema_version": 1, "kind": "search", "generated_at": "2026-11-03T08:15:00Z", "filters": {...}, ...}

- ``schema_version``: :data:`SCHEMA_VERSION`, raised when a key is renamed or a value changes type;
- ``generated_at``: when the document was written, UTC, ISO 8601 to the second;
- ``filters``: the options that narrowed the answer, as given (``null`` when not given);
- money: a decimal string, exact (``"12.34"``, ``"0.0004"``; at least two decimals, never a float, never
  rounded, never summed across currencies): :func:`money`;
- counts: integers; dates and times: ISO 8601 strings; lists: JSON lists.

Text stays exact (it is data) and every control character is escaped (:func:`billing_audit.inert.json_inert`).
"""

from __future__ import annotations

import json
from datetime import UTC, date, datetime
from decimal import Decimal
from typing import Any

from billing_audit.inert import json_inert

SCHEMA_VERSION = 1


def now() -> str:
    """The time a document is generated: UTC, to the second, with a Z."""
    return datetime.now(UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def money(value: Decimal | int | str | None) -> str | None:
    """An amount as an exact decimal string with at least two decimals: Decimal("12.3400000000") -> "12.34",
    Decimal("0.0004") -> "0.0004", 5 -> "5.00"; None stays None (n/a)."""
    if value is None:
        return None
    d = value if isinstance(value, Decimal) else Decimal(str(value))
    if not d.is_finite():
        raise ValueError(f"not an amount: {value!r}")
    text = format(d.normalize(), "f")
    whole, _, frac = text.partition(".")
    return f"{whole}.{frac.ljust(2, '0')}"


def plain(value: Any) -> Any:
    """A value as JSON has it: Decimal -> money string, date/datetime -> ISO 8601, tuple -> list, nested."""
    if isinstance(value, Decimal):
        return money(value)
    if isinstance(value, datetime):
        return value.isoformat()
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    return value


def records(df: Any) -> list[dict[str, Any]]:
    """A polars frame's rows as JSON objects (money as strings, lists as lists)."""
    return [plain(r) for r in df.iter_rows(named=True)]


def envelope(kind: str, filters: dict[str, Any] | None = None, **body: Any) -> dict[str, Any]:
    """A document: schema_version, kind, generated_at, filters (when the command has any), then ``body``."""
    doc: dict[str, Any] = {"schema_version": SCHEMA_VERSION, "kind": kind, "generated_at": now()}
    if filters is not None:
        doc["filters"] = plain(filters)
    doc.update({k: plain(v) for k, v in body.items()})
    return doc


def dumps(doc: dict[str, Any]) -> str:
    """The document as indented JSON text, control characters escaped."""
    return json_inert(json.dumps(doc, indent=2, ensure_ascii=False))
