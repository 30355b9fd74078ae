"""Interruption events: recognised from their content beside the bills, stored once per (provider, resource, time,
kind), malformed records named by file, record and key (fixtures/gen_events.py writes the documented shapes)."""

from __future__ import annotations

import gzip
import importlib.util
import json
from datetime import datetime
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from support import FIXTURES

_spec = importlib.util.spec_from_file_location("gen_events", FIXTURES / "gen_events.py")
assert _spec is not None and _spec.loader is not None
gen_events = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_events)  # the fixtures' own generator: its shapes, not copies of them

EVENTS = FIXTURES / "events"
SCEN = EVENTS / "scenarios"
AZ_VM = gen_events.AZ_VM
FIREHOSE = "aws-firehose/2026/11/01/02/spot-events-1-2026-11-01-02-15-00-4e1c.gz"


def _rows(db: Path) -> list[tuple]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT provider, resource_id, time, kind, source_file, source_row, source_format "
                           "FROM interruption_events ORDER BY provider, resource_id, time, kind").fetchall()
    finally:
        con.close()


def test_every_source_is_recognised_from_its_content_beside_the_bills(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        rep = store.ingest([FIXTURES / "scenarios", SCEN])
    assert not rep.errors
    assert rep.count("ingested") == 2 and rep.rows == 27  # the two scenario exports, beside the events
    ct = ("aws-cloudtrail/AWSLogs/444455557777/CloudTrail/us-east-1/2026/11/01/"
          "444455557777_CloudTrail_us-east-1_20261101T0215Z_Xy12.json.gz")
    az = ("azure-activity-log/insights-activity-logs/resourceId=/SUBSCRIPTIONS/5A5A5A5A-0000-4000-8000-00000000EU01/"
          "y=2026/m=11/d=02/h=00/m=00/PT1H.json")
    s = str(SCEN) + "/"
    assert _rows(db) == [
        ("aws", "i-0a0000000000a2", datetime(2026, 11, 1, 2, 5), "rebalance_recommendation", s + FIREHOSE, 1,
         "AWS EventBridge EC2 events"),
        ("aws", "i-0a0000000000a2", datetime(2026, 11, 1, 2, 10), "interruption_warning", s + FIREHOSE, 2,
         "AWS EventBridge EC2 events"),
        ("aws", "i-0a0000000000a2", datetime(2026, 11, 1, 2, 12, 5), "eviction", s + ct, 2, "AWS CloudTrail log"),
        ("aws", "i-0a0000000000a2", datetime(2026, 11, 1, 2, 40), "interruption_warning", s + FIREHOSE, 3,
         "AWS EventBridge EC2 events"),
        # the CloudWatch Logs export: a bare 000000.gz of "<timestamp> <json>" lines
        ("aws", "i-0b0000000000b1", datetime(2026, 11, 1, 10, 30), "interruption_warning",
         s + "aws-cloudwatch/3f1a2b-export/spot-events-stream/000000.gz", 1, "AWS EventBridge EC2 events"),
        ("aws", "i-0c0000000000c1", datetime(2026, 11, 1, 22, 58), "eviction", s + "node-handler/evictions.csv", 1,
         "interruption events CSV"),
        ("azure", AZ_VM, datetime(2026, 11, 2, 5), "eviction", s + az, 1, "Azure Activity Log records"),
        ("azure", AZ_VM, datetime(2026, 11, 2, 14, 30), "eviction", s + az, 3, "Azure Activity Log records"),
    ]
    # records of the sources that are no interruption are said, not silently dropped
    assert f"{s + ct}: 1 record(s) are not interruption events (AWS CloudTrail log); not kept" in rep.notes
    assert f"{s + az}: 1 record(s) are not interruption events (Azure Activity Log records); not kept" in rep.notes
    assert rep.events.summary() == "5 event file(s) read (8 interruption events: 8 new, 0 already held)"


def test_re_ingesting_the_same_or_an_overlapping_file_counts_nothing_twice(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        assert store.ingest([SCEN]).events.added == 8
        again = store.ingest([SCEN])
        over = store.ingest([EVENTS / "overlap"])
    assert (again.events.added, sum(f.held for f in again.events.files)) == (0, 8)
    assert again.events.summary() == "5 event file(s) read (8 interruption events: 0 new, 8 already held)"
    # the overlap file: the 02:10 and 02:40 warnings again (02:40 twice) and one new rebalance recommendation
    (f,) = over.events.files
    assert (f.records, f.events, f.added, f.held, f.repeated) == (4, 4, 1, 2, 1)
    assert over.events.summary() == ("1 event file(s) read (4 interruption events: 1 new, 2 already held, "
                                     "1 repeated in their file)")
    rows = _rows(db)
    assert len(rows) == 9
    assert ("aws", "i-0d0000000000d2", datetime(2026, 11, 2, 7, 1), "rebalance_recommendation") in [r[:4] for r in rows]
    # the first file to deliver an event stays its source
    assert [r[4].endswith(FIREHOSE) for r in rows if r[2] == datetime(2026, 11, 1, 2, 40)] == [True]


def test_gcp_preemption_names_the_instance_as_the_billing_export_does(tmp_path: Path) -> None:
    db = tmp_path / "s.duckdb"
    with billing_audit.open(db) as store:
        rep = store.ingest([EVENTS / "gcp"])
    assert not rep.errors
    ((prov, rid, t, kind, _, row, fmt),) = _rows(db)
    assert (prov, rid, t, kind, row, fmt) == (
        "gcp", "//compute.googleapis.com/projects/train-prj-1/zones/us-central1-a/instances/4071234567890123456",
        datetime(2026, 11, 3, 0, 20, 7, 123456), "preemption", 1, "GCP Cloud Audit Logs entries")


def _ingest_cli(tmp_path: Path, *paths: Path) -> tuple[int, str]:
    r = CliRunner().invoke(main, ["ingest", "--db", str(tmp_path / "s.duckdb"), *map(str, paths)])
    return r.exit_code, r.output


def test_a_malformed_event_fails_its_file_naming_the_record_and_key(tmp_path: Path) -> None:
    good = gen_events.eventbridge(gen_events.WARNING, "i-0a0000000000a2", "2026-11-01T02:10:00Z", 1)
    bad = gen_events.eventbridge(gen_events.WARNING, "i-0a0000000000a2", "2026-11-01T02:40:00Z", 2)
    del bad["detail"]["instance-id"]  # type: ignore[attr-defined]
    p = tmp_path / "in" / "events.json.gz"
    p.parent.mkdir()
    with gzip.open(p, "wt") as f:
        f.write(gen_events.lines([good, bad]))
    code, out = _ingest_cli(tmp_path, p.parent)
    assert code != 0
    assert (f"{p}, row 2: AWS EventBridge EC2 events: detail.instance-id: the instance id is missing") in out
    assert "Traceback" not in out
    assert _rows(tmp_path / "s.duckdb") == []  # nothing of the failing file is stored


def test_a_bad_time_and_broken_json_are_named(tmp_path: Path) -> None:
    ev = gen_events.eventbridge(gen_events.WARNING, "i-0a0000000000a2", "yesterday", 1)
    ok = gen_events.eventbridge(gen_events.WARNING, "i-0a0000000000a2", "2026-11-01T02:10:00Z", 2)
    a = tmp_path / "a" / "when.jsonl"
    a.parent.mkdir()
    a.write_text(gen_events.lines([ok, ev]), encoding="utf-8")
    code, out = _ingest_cli(tmp_path, a.parent)
    assert code != 0 and f"{a}, row 2: AWS EventBridge EC2 events: time: cannot read 'yesterday' as an ISO 8601 time" in out
    b = tmp_path / "b" / "cut.jsonl"
    b.parent.mkdir()
    b.write_text(gen_events.lines([ok]) + '{"detail-type": "EC2 Spot', encoding="utf-8")
    code, out = _ingest_cli(tmp_path, b.parent)
    assert code != 0 and f"{b}: record 2: malformed JSON" in out


def test_the_generic_csv_names_row_and_column(tmp_path: Path) -> None:
    p = tmp_path / "in" / "handler.csv"
    p.parent.mkdir()
    p.write_text("resource_id,time,kind\ni-0c0000000000c1,2026-11-01T22:58:00Z,eviction\n"
                 "i-0c0000000000c2,2026-11-01T23:30:00Z,evicted\n", encoding="utf-8")
    code, out = _ingest_cli(tmp_path, p.parent)
    assert code != 0
    assert (f"{p}, row 2, column 'kind': unknown kind 'evicted' (expected one of interruption_warning, eviction, "
            "preemption, rebalance_recommendation)") in out
    p.write_text("resource_id,time,kind\nnode-7,2026-11-01T22:58:00Z,eviction\n", encoding="utf-8")
    code, out = _ingest_cli(tmp_path, p.parent)
    assert code != 0 and f"{p}, row 1, column 'provider': cannot tell the provider of 'node-7'" in out
    # the provider from the id's shape when there is no provider column
    p.write_text("resource_id,time,kind\ni-0c0000000000c1,2026-11-01T22:58:00+01:00,eviction\n", encoding="utf-8")
    code, out = _ingest_cli(tmp_path, p.parent)
    assert code == 0, out
    assert [r[:4] for r in _rows(tmp_path / "s.duckdb")] == [
        ("aws", "i-0c0000000000c1", datetime(2026, 11, 1, 21, 58), "eviction")]


def test_a_json_that_is_neither_an_export_nor_an_event_is_refused(tmp_path: Path) -> None:
    p = tmp_path / "in" / "thing.json"
    p.parent.mkdir()
    p.write_text(json.dumps({"hello": "world", "n": 1}) + "\n", encoding="utf-8")
    code, out = _ingest_cli(tmp_path, p.parent)
    assert code != 0
    assert f"{p}: not a billing export this tool understands" in out
    assert ("nor an interruption event file (AWS EventBridge EC2 events, AWS CloudTrail log, Azure Activity Log "
            "records, GCP Cloud Audit Logs entries") in out


@pytest.mark.parametrize("wrapped", [True, False])
def test_azure_records_old_and_new_layout(tmp_path: Path, wrapped: bool) -> None:
    rec = gen_events.activity_record("2026-11-02T05:00:00.0000000Z", AZ_VM,
                                     "Microsoft.Resourcehealth/healthevent/Activated/action", "ResourceHealth",
                                     {"title": "Virtual machine has been preempted"})
    other = gen_events.activity_record("2026-11-02T06:00:00Z", AZ_VM, "Microsoft.Resourcehealth/healthevent/Activated/action",
                                       "ResourceHealth", {"title": "Virtual machine is unavailable: a host failure"})
    p = tmp_path / "in" / "PT1H.json"
    p.parent.mkdir()
    p.write_text(json.dumps({"records": [rec, other]}) if wrapped else gen_events.lines([rec, other]), encoding="utf-8")
    code, out = _ingest_cli(tmp_path, p.parent)
    assert code == 0, out
    # only the preemption counts: a host failure is not a Spot eviction
    assert [r[:4] for r in _rows(tmp_path / "s.duckdb")] == [("azure", AZ_VM, datetime(2026, 11, 2, 5), "eviction")]


def test_firehose_without_a_delimiter_concatenates_the_events(tmp_path: Path) -> None:
    # Firehose writes records back to back unless a newline delimiter is configured: '{...}{...}'
    a = gen_events.eventbridge(gen_events.WARNING, "i-0a0000000000a2", "2026-11-01T02:10:00Z", 1)
    b = gen_events.eventbridge(gen_events.REBALANCE, "i-0a0000000000a2", "2026-11-01T02:05:00+00:00", 2)
    p = tmp_path / "in" / "spot-events-1-2026-11-01-02-15-00-ab12"  # Firehose objects may have no suffix at all ...
    p.parent.mkdir()
    p = p.with_name(p.name + ".gz")  # ... read when gzipped (a .gz name), as compressed deliveries are named
    with gzip.open(p, "wt") as f:
        f.write(json.dumps(a) + json.dumps(b))
    code, out = _ingest_cli(tmp_path, p.parent)
    assert code == 0, out
    assert [(r[2], r[3], r[5]) for r in _rows(tmp_path / "s.duckdb")] == [
        (datetime(2026, 11, 1, 2, 5), "rebalance_recommendation", 2), (datetime(2026, 11, 1, 2, 10), "interruption_warning", 1)]
