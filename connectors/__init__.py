"""Everything provider-specific: export formats, manifests and (later) remote pulls.

``FORMATS`` is tried in order when a file is detected, most specific first.
"""

from __future__ import annotations

from billing_audit.formats import ExportFormat, ManifestReader
from connectors.aws_cur import CurLegacy, CurManifest

FORMATS: list[ExportFormat] = [
    CurLegacy(),
]

MANIFESTS: list[ManifestReader] = [
    CurManifest(),
]
