"""Azure: Cost Management cost details exports (EA, MCA; CSV, CSV gz, parquet) with their manifests.

Azure FOCUS exports are read by :mod:`connectors.focus`.  Parts loaded on demand: ``pull`` (the Azure SDKs:
Cost Management run history, Blob Storage), ``synthetic`` (``generate --provider azure``).
"""

from __future__ import annotations

from connectors.azure import cost_details

PROVIDER = "azure"  # the x_Provider value of this cloud's lines
TITLE = "Azure"  # the cloud's name in the commands' help (its puller's title: `billing-audit --help` reads it here)
FORMATS = [*cost_details.FORMATS]
MANIFESTS = [*cost_details.MANIFESTS]
LAYOUTS = [*cost_details.LAYOUTS]
