"""Apache Spark: the engine for estates past one machine (pyspark, imported by ``engine`` only, when it runs).

Not a cloud: it reads no export format of its own, so it declares no ``FORMATS``.
"""

from __future__ import annotations

FORMATS: list[object] = []
MANIFESTS: list[object] = []
