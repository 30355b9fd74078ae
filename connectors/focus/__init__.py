"""FOCUS (FinOps Open Cost and Usage Specification) exports as AWS, Azure, GCP and other tools write them.

A standard, not a cloud: the cloud packages may use its column list and mapping (the AWS Athena engine reads
the AWS FOCUS Glue table through it); it imports none of them.
"""

from __future__ import annotations

from connectors.focus import formats

FORMATS = [*formats.FORMATS]
MANIFESTS = [*formats.MANIFESTS]
