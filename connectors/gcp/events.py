"""GCP interruption events: Cloud Audit Logs system events ``compute.instances.preempted`` (billing_audit.events).

A log sink to a Cloud Storage bucket writes the ``cloudaudit.googleapis.com/system_event`` log as JSON lines of
LogEntry objects (``logName``, ``resource.labels`` {project_id, zone, instance_id}, ``protoPayload`` with
``methodName`` "compute.instances.preempted" and ``resourceName`` ``projects/P/zones/Z/instances/NAME``,
``timestamp``).  The resource is named as the billing export names it (``resource.global_name``):
``//compute.googleapis.com/projects/P/zones/Z/instances/<numeric instance id>``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from billing_audit.events import EventSource, text_at, utc

PROVIDER = "gcp"
PREEMPTED = "compute.instances.preempted"


def owns(resource_id: str) -> bool:
    return resource_id.startswith("//compute.googleapis.com/")


class AuditSystemEvent(EventSource):
    id = "gcp-audit-log"
    provider = PROVIDER
    title = "GCP Cloud Audit Logs entries"

    def recognise(self, record: Any) -> bool:
        return isinstance(record, dict) and "logName" in record and "protoPayload" in record

    def read(self, record: Any) -> list[tuple[str, datetime, str]]:
        if text_at(record, "protoPayload", "methodName") != PREEMPTED:
            return []
        t = utc(record.get("timestamp"), "timestamp")
        project = text_at(record, "resource", "labels", "project_id")
        zone = text_at(record, "resource", "labels", "zone")
        instance = text_at(record, "resource", "labels", "instance_id")
        name = text_at(record, "protoPayload", "resourceName")
        if instance and project and zone:
            return [(f"//compute.googleapis.com/projects/{project}/zones/{zone}/instances/{instance}", t, "preemption")]
        if name:
            raise ValueError("resource.labels.instance_id: the numeric instance id is missing (the billing export "
                             f"names instances by it; protoPayload.resourceName {name!r} alone cannot be matched)")
        raise ValueError("resource.labels: project_id, zone and instance_id are missing")


SOURCES = [AuditSystemEvent()]
