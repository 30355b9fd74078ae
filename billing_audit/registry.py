"""Where the connector packages are: found by name, loaded when first asked for.

The core knows no provider.  Each connector package (``connectors.aws``, ``connectors.azure``, ...) is
declared as an entry point of the group ``billing_audit.connectors`` (pyproject.toml), the way dlt finds
destinations and sqlglot finds dialects by name; a third-party package can add its own the same way.
Importing a connector package loads its formats and manifests only: its heavier parts (``pull`` with a
cloud SDK, a warehouse engine, the ``synthetic`` generator) are submodules loaded by :func:`part` when a
command needs them.

>>> from billing_audit import registry
>>> registry.names()                                     # doctest: +SKIP
('aws', 'azure', 'focus', 'gcp')
>>> registry.part("gcp", "synthetic").ROWS_PER_FILE      # doctest: +SKIP
2000000
"""

from __future__ import annotations

import difflib
import functools
import importlib
import importlib.util
from importlib.metadata import entry_points
from types import ModuleType

from billing_audit.errors import BillingAuditError

GROUP = "billing_audit.connectors"


@functools.cache
def _table() -> dict[str, str]:
    """Connector name -> module name, from the installed entry points (first on sys.path wins)."""
    table: dict[str, str] = {}
    for ep in entry_points(group=GROUP):
        table.setdefault(ep.name, ep.value)
    if not table:
        raise BillingAuditError(f"no connector packages are installed (entry point group {GROUP!r}): "
                                "install billing-audit with pip, e.g. `pip install -e .`")
    return dict(sorted(table.items()))


def names() -> tuple[str, ...]:
    """Every connector's name, sorted."""
    return tuple(_table())


def module_name(name: str) -> str:
    """The module of connector ``name``; an unknown name gets a "did you mean" answer."""
    table = _table()
    if name not in table:
        near = difflib.get_close_matches(name, table, n=1)
        hint = f" (did you mean {near[0]!r}?)" if near else ""
        raise BillingAuditError(f"unknown connector {name!r}{hint}: expected one of {', '.join(table)}")
    return table[name]


def connector(name: str) -> ModuleType:
    """The connector package ``name`` (its formats and manifests loaded, nothing else)."""
    return importlib.import_module(module_name(name))


def has_part(name: str, part: str) -> bool:
    """Whether connector ``name`` has the submodule ``part``, without importing it."""
    return importlib.util.find_spec(f"{module_name(name)}.{part}") is not None


def part(name: str, part: str) -> ModuleType:
    """Submodule ``part`` of connector ``name`` (``pull``, ``synthetic``, an engine), imported now."""
    if not has_part(name, part):
        raise BillingAuditError(f"connector {name!r} has no {part!r} part")
    return importlib.import_module(f"{module_name(name)}.{part}")


def providers() -> tuple[str, ...]:
    """The clouds the connectors read bills of: the values ``x_Provider`` takes (each connector's ``PROVIDER``)."""
    return tuple(sorted({p for n in names() if (p := getattr(connector(n), "PROVIDER", None))}))


def with_part(part_name: str) -> tuple[str, ...]:
    """The connectors that have submodule ``part_name`` (e.g. every connector that can ``pull``)."""
    return tuple(n for n in names() if has_part(n, part_name))
