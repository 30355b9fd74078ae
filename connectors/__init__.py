"""Everything provider-specific: export formats, manifests and (later) remote pulls.

Each module here may define module-level ``FORMATS`` (ExportFormat instances) and
``MANIFESTS`` (ManifestReader instances); they are collected on import.  Formats
are tried in ``priority`` order (lower first, so more specific formats come
before generic ones) when a file is detected.
"""

from __future__ import annotations

import importlib
import pkgutil

from billing_audit.formats import ExportFormat, ManifestReader

FORMATS: list[ExportFormat] = []
MANIFESTS: list[ManifestReader] = []

for _info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
    _mod = importlib.import_module(f"{__name__}.{_info.name}")
    FORMATS.extend(getattr(_mod, "FORMATS", []))
    MANIFESTS.extend(getattr(_mod, "MANIFESTS", []))

FORMATS.sort(key=lambda f: (f.priority, f.id))
