"""GCP: Cloud Billing export to BigQuery (standard and detailed/resource tables), as extracted to parquet,
NDJSON or CSV.

Parts loaded on demand: ``pull`` (google-cloud-bigquery), ``bigquery`` (the BigQuery engine over the export
table in place), ``synthetic`` (``generate --provider gcp``).
"""

from __future__ import annotations

from connectors.gcp import billing_export

PROVIDER = "gcp"  # the x_Provider value of this cloud's lines
TITLE = "GCP"  # the cloud's name in the commands' help (its puller's title: `billing-audit --help` reads it here)
FORMATS = [*billing_export.FORMATS]
MANIFESTS = [*billing_export.MANIFESTS]
