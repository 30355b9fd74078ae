"""AWS: legacy Cost and Usage Reports (Athena parquet, CSV gz/zip) and CUR 2.0 Data Exports with their manifests.

AWS FOCUS Data Exports are read by :mod:`connectors.focus`.  Parts loaded on demand: ``pull`` (boto3),
``athena`` (the Athena engine over the CUR 2.0 / FOCUS Glue table), ``synthetic`` (``generate --provider aws``).
"""

from __future__ import annotations

from connectors.aws import cur, cur2

PROVIDER = "aws"  # the x_Provider value of this cloud's lines
TITLE = "AWS"  # the cloud's name in the commands' help (its puller's title: `billing-audit --help` reads it here)
FORMATS = [*cur.FORMATS, *cur2.FORMATS]
MANIFESTS = [*cur.MANIFESTS, *cur2.MANIFESTS]
