"""Connector packages, one per cloud (``aws``, ``azure``, ``gcp``) plus ``focus``, the FinOps Open Cost and
Usage Specification that every cloud can write.

Each package owns everything about its exports: the formats and manifests (module-level ``FORMATS``
and ``MANIFESTS`` in its ``__init__``, the mapping SQL as data), and parts the core loads only when a
command needs them: ``pull`` (the cloud's SDK, imported there and only there), its warehouse engine
(``athena``, ``bigquery``) and ``synthetic`` (the export generator behind ``billing-audit generate``).
The core finds the packages through the ``billing_audit.connectors`` entry points (pyproject.toml)
and never imports them by name.  A cloud package never imports another; any may use ``focus`` and
the shared plumbing beside them (``pull_common``, ``synthetic``).
"""
