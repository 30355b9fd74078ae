"""AWS interruption events: EventBridge EC2 events and CloudTrail's ``BidEvictedEvent`` (billing_audit.events).

- EventBridge events (``source: aws.ec2``) as a rule delivers them to S3 through Kinesis Data Firehose
  (newline-delimited or concatenated JSON, usually gzipped) or as a CloudWatch Logs export writes them
  (gzipped lines ``<ISO timestamp> <event json>``): ``detail-type`` "EC2 Spot Instance Interruption Warning"
  (an interruption warning, two minutes before) and "EC2 Instance Rebalance Recommendation"; the instance is
  ``detail.instance-id``, the time the event's ``time``.
- CloudTrail log files (``{"Records": [...]}``, gzipped): ``eventName`` "BidEvictedEvent" (``eventType``
  AwsServiceEvent) is EC2 terminating a Spot Instance (an eviction); the instances are
  ``serviceEventDetails.instanceIdSet`` (else the ``resources`` ARNs / ``instanceId`` entries), the time ``eventTime``.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any

from billing_audit.events import EventSource, text_at, utc

PROVIDER = "aws"
INSTANCE = re.compile(r"^i-[0-9a-f]{8,17}$")
DETAIL_KINDS = {"EC2 Spot Instance Interruption Warning": "interruption_warning",
                "EC2 Instance Rebalance Recommendation": "rebalance_recommendation"}


def owns(resource_id: str) -> bool:
    """An EC2 instance id (the generic CSV's provider when it has no provider column)."""
    return bool(INSTANCE.match(resource_id)) or resource_id.startswith("arn:aws:")


def _instance(value: str) -> str:
    """``i-...`` from an instance id or an instance ARN."""
    return value.rsplit("/", 1)[-1] if value.startswith("arn:") else value


class EventBridgeEC2(EventSource):
    id = "aws-eventbridge"
    provider = PROVIDER
    title = "AWS EventBridge EC2 events"

    def recognise(self, record: Any) -> bool:
        return isinstance(record, dict) and "detail-type" in record and "detail" in record and "source" in record

    def read(self, record: Any) -> list[tuple[str, datetime, str]]:
        kind = DETAIL_KINDS.get(str(record.get("detail-type")))
        if kind is None or record.get("source") != "aws.ec2":
            return []
        rid = text_at(record, "detail", "instance-id")
        if rid is None:
            raise ValueError("detail.instance-id: the instance id is missing")
        return [(_instance(rid), utc(record.get("time"), "time"), kind)]


class CloudTrailBidEvicted(EventSource):
    id = "aws-cloudtrail"
    provider = PROVIDER
    title = "AWS CloudTrail log"

    def recognise(self, record: Any) -> bool:
        return isinstance(record, dict) and "eventName" in record and "eventTime" in record and (
            "eventVersion" in record or "eventSource" in record)

    def read(self, record: Any) -> list[tuple[str, datetime, str]]:
        if record.get("eventName") != "BidEvictedEvent":
            return []
        t = utc(record.get("eventTime"), "eventTime")
        ids = (record.get("serviceEventDetails") or {}).get("instanceIdSet") if isinstance(
            record.get("serviceEventDetails"), dict) else None
        if not ids:
            ids = [r.get("ARN") or r.get("instanceId") for r in record.get("resources") or [] if isinstance(r, dict)]
        ids = [i.strip() for i in ids or [] if isinstance(i, str) and i.strip()]
        if not ids:
            raise ValueError("serviceEventDetails.instanceIdSet: no instance id (nor in resources)")
        return [(_instance(i), t, "eviction") for i in ids]


SOURCES = [EventBridgeEC2(), CloudTrailBidEvicted()]
