"""Azure interruption events: Spot evictions in the Activity Log as diagnostic settings export it (billing_audit.events).

A diagnostic setting sending the Activity Log to a storage account writes blobs
``insights-activity-logs/resourceId=/SUBSCRIPTIONS/<sub>/y=YYYY/m=MM/d=DD/h=HH/m=00/PT1H.json``: JSON lines, one
record each (files written before November 2018: one ``{"records": [...]}`` object), with ``time``,
``resourceId`` (upper-cased), ``operationName``, ``category`` and ``properties``.  A Spot eviction shows as a
Resource Health record (``category`` "ResourceHealth", ``operationName``
"Microsoft.Resourcehealth/healthevent/Activated/action") whose title or details say the VM was preempted or
evicted (Azure's wording: "...has been preempted", "Spot eviction"); and, where a VM or scale set records it,
as an administrative ``Microsoft.Compute/virtualMachines/evict/action`` or ``.../virtualMachineScaleSets/
virtualMachines/evict/action``-style operation.  Records of other operations are read and not kept.  The exact
wording of the Resource Health title could not be checked against a real eviction here (see README).
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from billing_audit.events import EventSource, text_at, utc

PROVIDER = "azure"
EVICTED = re.compile(r"preempt|evict", re.I)
EVICT_OPERATION = re.compile(r"^microsoft\.compute/virtualmachines(/|scalesets/).*evict.*/action$", re.I)


def owns(resource_id: str) -> bool:
    return resource_id.lower().startswith("/subscriptions/")


class ActivityLog(EventSource):
    id = "azure-activity-log"
    provider = PROVIDER
    title = "Azure Activity Log records"

    def recognise(self, record: Any) -> bool:
        return isinstance(record, dict) and "operationName" in record and "category" in record and (
            "resourceId" in record or "time" in record)

    def read(self, record: Any) -> list[tuple[str, datetime, str]]:
        op = str(record.get("operationName") or "")
        props = record.get("properties") if isinstance(record.get("properties"), dict) else {}
        category = str(record.get("category") or "").lower()
        evicted = bool(EVICT_OPERATION.match(op))
        if category == "resourcehealth" and not evicted:
            words = " ".join(str(props.get(k) or "") for k in ("title", "details", "cause", "type"))
            evicted = bool(EVICTED.search(words))
        if not evicted:
            return []
        rid = text_at(record, "resourceId")
        if rid is None:
            raise ValueError("resourceId: the VM's resource id is missing")
        return [(rid, utc(record.get("time"), "time"), "eviction")]


SOURCES = [ActivityLog()]
