"""`billing-audit pull aws-events` against moto's S3 server (tests/peers_aws.py), objects in the real layouts:
the scenario events of fixtures/events/scenarios (fixtures/gen_events.py) under Firehose, CloudTrail and CloudWatch
Logs export keys, beside gen_events.pull_objects()'s other days, digest file and December object.

Worked out by hand for --period 2026-11 (an hour of delivery lag either side):
- spot-events/2026/11/01/02/...: rebalance 02:05, warnings 02:10 and 02:40 for i-0a0000000000a2 (3 events);
- AWSLogs/.../CloudTrail/us-east-1/2026/11/01/...: BidEvictedEvent 02:12:05 (1; its RunInstances record is no event);
- exports/3f1a2b-export/spot-events-stream/000000.gz (no date in the key: fetched, said): warning 10:30 for i-0b...b1;
- spot-events/2026/12/01/00/...: a warning at 2026-11-30 23:59:40 (the first hour of December: lag) for i-0e...e1;
- left out: 2026/10/20/14 and 2026/12/09/08 (other days), the CloudTrail-Digest file.
Six events, from four objects.
"""

from __future__ import annotations

import importlib.util
import json
import logging
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner, Result

import billing_audit
from billing_audit.cli import main
from peers_aws import AwsPeer, Fault
from support import FIXTURES

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("gen_events", FIXTURES / "gen_events.py")
assert _spec is not None and _spec.loader is not None
gen_events = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_events)

BUCKET = "spot-events-bucket"
SCEN = FIXTURES / "events" / "scenarios"
FIREHOSE = "spot-events/2026/11/01/02/spot-events-1-2026-11-01-02-15-00-4e1c.gz"
TRAIL = ("AWSLogs/444455557777/CloudTrail/us-east-1/2026/11/01/"
         "444455557777_CloudTrail_us-east-1_20261101T0215Z_Xy12.json.gz")
EXPORT = "exports/3f1a2b-export/spot-events-stream/000000.gz"
DECEMBER = "spot-events/2026/12/01/00/spot-events-1-2026-12-01-00-00-05-5b5b.gz"
OCTOBER = "spot-events/2026/10/20/14/spot-events-1-2026-10-20-14-05-00-9a9a.gz"
LATER = "spot-events/2026/12/09/08/spot-events-1-2026-12-09-08-00-00-6c6c.gz"
(BAD,) = gen_events.pull_objects()["aws_bad"]


@pytest.fixture(scope="module")
def peer_server() -> Iterator[AwsPeer]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    p = AwsPeer()
    try:
        yield p
    finally:
        p.stop()


def _put(peer: AwsPeer, objects: dict[str, bytes]) -> None:
    s3 = peer.s3()
    for key, body in objects.items():
        s3.put_object(Bucket=BUCKET, Key=key, Body=body)


@pytest.fixture
def peer(peer_server: AwsPeer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AwsPeer:
    peer_server.reset()
    peer_server.s3().create_bucket(Bucket=BUCKET)
    _put(peer_server, {
        FIREHOSE: (SCEN / "aws-firehose/2026/11/01/02/spot-events-1-2026-11-01-02-15-00-4e1c.gz").read_bytes(),
        TRAIL: (SCEN / "aws-cloudtrail" / TRAIL).read_bytes(),
        EXPORT: (SCEN / "aws-cloudwatch/3f1a2b-export/spot-events-stream/000000.gz").read_bytes(),
        **gen_events.pull_objects()["aws"],
    })
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return peer_server


def pull(peer: AwsPeer, tmp: Path, *args: str, db: Path | None = None) -> Result:
    return CliRunner().invoke(main, ["pull", "aws-events", "--endpoint-url", peer.url, "--bucket", BUCKET,
                                     "--db", str(db or tmp / "events.duckdb"), "--cache", str(tmp / "cache"), *args])


def rows(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT resource_id, time, kind, source_file FROM interruption_events "
                           "ORDER BY time, kind").fetchall()
    finally:
        con.close()


def s3(key: str) -> str:
    return f"s3://{BUCKET}/{key}"


NOVEMBER = [
    ("i-0a0000000000a2", datetime(2026, 11, 1, 2, 5), "rebalance_recommendation", s3(FIREHOSE)),
    ("i-0a0000000000a2", datetime(2026, 11, 1, 2, 10), "interruption_warning", s3(FIREHOSE)),
    ("i-0a0000000000a2", datetime(2026, 11, 1, 2, 12, 5), "eviction", s3(TRAIL)),
    ("i-0a0000000000a2", datetime(2026, 11, 1, 2, 40), "interruption_warning", s3(FIREHOSE)),
    ("i-0b0000000000b1", datetime(2026, 11, 1, 10, 30), "interruption_warning", s3(EXPORT)),
    ("i-0e0000000000e1", datetime(2026, 11, 30, 23, 59, 40), "interruption_warning", s3(DECEMBER)),
]


def test_a_period_pull_stores_its_events_once_and_a_second_pull_fetches_and_adds_nothing(peer: AwsPeer,
                                                                                          tmp_path: Path) -> None:
    r = pull(peer, tmp_path, "--period", "2026-11")
    assert r.exit_code == 0, r.output
    assert rows(tmp_path / "events.duckdb") == NOVEMBER
    # only the period's objects (and the first hour of December) went over the wire
    fetched = sorted(g.key_path.removeprefix(f"/{BUCKET}/") for g in peer.gets())
    assert fetched == sorted([FIREHOSE, TRAIL, EXPORT, DECEMBER])
    assert "1 object(s) left out: CloudTrail digest files (hashes of the log files, no events)" in r.stderr
    assert (f"note: 1 object(s) have no date in their key (CloudWatch Logs exports: <task id>/<log stream>/000000.gz, "
            f"e.g. {EXPORT}): fetched whatever the period") in r.stderr
    assert f"s3://{BUCKET}: 4 object(s) downloaded" in r.stderr
    assert f"{s3(TRAIL)}: 1 record(s) are not interruption events (AWS CloudTrail log); not kept" in r.stderr
    assert "4 event file(s) read (6 interruption events: 6 new, 0 already held)" in r.stderr
    # the cache keeps the keys
    assert (tmp_path / "cache" / BUCKET / FIREHOSE).is_file() and not any((tmp_path / "cache").rglob("*.part"))

    before = len(peer.gets())
    again = pull(peer, tmp_path, "--period", "2026-11")
    assert again.exit_code == 0, again.output
    assert len(peer.gets()) == before  # nothing downloaded
    assert f"s3://{BUCKET}: 0 object(s) downloaded (0 bytes), 4 unchanged in the cache" in again.stderr
    assert "0 event file(s) read (0 interruption events: 0 new, 0 already held), 4 unchanged since they were read" \
        in again.stderr
    assert rows(tmp_path / "events.duckdb") == NOVEMBER

    # the same cache into a new store: read (the store has not seen them), nothing downloaded
    fresh = pull(peer, tmp_path, "--period", "2026-11", db=tmp_path / "other.duckdb")
    assert fresh.exit_code == 0 and len(peer.gets()) == before
    assert rows(tmp_path / "other.duckdb") == NOVEMBER


def test_since_takes_the_days_from_it_on(peer: AwsPeer, tmp_path: Path) -> None:
    r = pull(peer, tmp_path, "--since", "2026-12-02")
    assert r.exit_code == 0, r.output
    assert [(x[0], x[1], x[2]) for x in rows(tmp_path / "events.duckdb")] == [
        ("i-0b0000000000b1", datetime(2026, 11, 1, 10, 30), "interruption_warning"),  # the undated export
        ("i-0e0000000000e1", datetime(2026, 12, 9, 8), "rebalance_recommendation"),
    ]
    quiet = pull(peer, tmp_path, "--since", "2026-12-02", "-q", db=tmp_path / "quiet.duckdb")
    assert quiet.exit_code == 0, quiet.output
    # -q: no counts, no progress; the note that an undated object was taken whatever the date is still said
    assert quiet.stdout == "" and quiet.stderr.splitlines() == [
        f"note: 1 object(s) have no date in their key (CloudWatch Logs exports: <task id>/<log stream>/000000.gz, "
        f"e.g. {EXPORT}): fetched whatever the period; their events are stored once like any other"]
    assert len(rows(tmp_path / "quiet.duckdb")) == 2
    bad = pull(peer, tmp_path, "--since", "2026-12-32")
    assert bad.exit_code == 2 and "--since '2026-12-32': expected YYYY-MM-DD, e.g. 2026-10-01" in bad.stderr
    both = pull(peer, tmp_path, "--since", "2026-12-02", "--period", "2026-11")
    assert both.exit_code == 2 and "give --period or --since, not both" in both.stderr


def test_an_object_that_is_no_event_file_is_named_by_its_key_and_nothing_of_it_is_stored(peer: AwsPeer,
                                                                                         tmp_path: Path) -> None:
    _put(peer, gen_events.pull_objects()["aws_bad"])
    r = pull(peer, tmp_path, "--period", "2026-11")
    assert r.exit_code == 2
    assert f"error: {s3(BAD)}: not an interruption event file" in r.stderr
    assert "Traceback" not in r.output
    assert rows(tmp_path / "events.duckdb") == NOVEMBER  # the others are stored, nothing of the bad one
    again = pull(peer, tmp_path, "--period", "2026-11")  # still refused: never read as if it were fine
    assert again.exit_code == 2 and f"error: {s3(BAD)}: not an interruption event file" in again.stderr


def test_dry_run_lists_keys_and_sizes_and_writes_nothing(peer: AwsPeer, tmp_path: Path) -> None:
    objects = {FIREHOSE: 0, TRAIL: 0, EXPORT: 0, DECEMBER: 0}
    listing = peer.s3().list_objects_v2(Bucket=BUCKET)["Contents"]
    for o in listing:
        if o["Key"] in objects:
            objects[o["Key"]] = int(o["Size"])
    r = pull(peer, tmp_path, "--period", "2026-11", "--dry-run")
    assert r.exit_code == 0, r.output
    total = sum(objects.values())
    lines = r.stdout.splitlines()
    assert lines[0] == (f"s3://{BUCKET}, 2026-11: 4 object(s), {total:,} bytes; 4 to fetch ({total:,} bytes); "
                        "2 dated outside it not fetched")
    assert sorted(lines[1:]) == sorted(f"    fetch  {k} ({n:,} bytes)" for k, n in objects.items())
    assert not peer.gets()
    assert not (tmp_path / "events.duckdb").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_the_reconciliation_after_a_pull_is_the_one_of_a_local_ingest(peer: AwsPeer, tmp_path: Path) -> None:
    """The scenario bills ingested, the events pulled: the same fees without events as reading the event files
    (delta's fee of 0.75 USD: no event; alpha's: the pulled warnings and eviction)."""
    db = tmp_path / "events.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([FIXTURES / "scenarios"]).errors
        store.tag()
    assert pull(peer, tmp_path, "--period", "2026-11", db=db).exit_code == 0
    local = tmp_path / "local.duckdb"
    with billing_audit.open(local) as store:
        assert not store.ingest([FIXTURES / "scenarios", SCEN / "aws-firehose", SCEN / "aws-cloudtrail",
                                 SCEN / "aws-cloudwatch"]).errors
        store.tag()

    def fees(path: Path) -> dict[str, Any]:
        r = CliRunner().invoke(main, ["search", "--db", str(path), "--fees-without-events", "--period", "2026-11",
                                      "--provider", "aws", "--format", "json"])
        assert r.exit_code == 0, r.output
        doc = json.loads(r.stdout)
        return {k: doc[k] for k in ("fees_without_events", "not_reconciled")}

    pulled = fees(db)
    assert [(f["resource_id"], f["disputable_amount"]) for f in pulled["fees_without_events"]] == [
        ("i-0d0000000000d2", "0.75")]
    assert pulled == fees(local)


def test_throttling_is_retried_and_access_denied_stops_the_pull_in_one_line(peer: AwsPeer, tmp_path: Path) -> None:
    peer.state.faults.append(Fault(FIREHOSE, status=503, code="SlowDown", times=2))
    r = pull(peer, tmp_path, "--period", "2026-11")
    assert r.exit_code == 0, r.output
    assert rows(tmp_path / "events.duckdb") == NOVEMBER
    peer.state.faults.append(Fault(LATER, status=403, code="AccessDenied", times=-1))
    denied = pull(peer, tmp_path, "--since", "2026-12-02", db=tmp_path / "denied.duckdb")
    assert denied.exit_code == 2
    assert denied.stderr.strip().splitlines()[-1] == (
        f"error: access denied to s3://{BUCKET} (get s3://{BUCKET}/{LATER}): the credentials need s3:ListBucket on "
        "the bucket and s3:GetObject on the objects under the prefix (and the bucket policy / KMS key must allow them)")
    assert not (tmp_path / "denied.duckdb").exists()  # stopped before the ingest: nothing stored
