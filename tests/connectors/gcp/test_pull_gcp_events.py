"""`billing-audit pull gcp-events`: the real google-cloud-storage client against a local server speaking the GCS
JSON API (tests/peers_gcs.py, one item per listing page), reached through STORAGE_EMULATOR_HOST; the log sink's
objects written by fixtures/gen_events.py (fixtures/events/gcp and gen_events.pull_objects()).

By hand, --period 2026-11: the 2026-11-03 00:00 object holds one compute.instances.preempted entry (a100-spot-g1,
instance 4071234567890123456, 00:20:07.123456789 -> .123456) and one automaticRestart (no event): one preemption.
The 2026-10-07 object (another preemption) is not fetched.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner, Result

from billing_audit.cli import main
from peers_gcs import FakeGcs
from support import FIXTURES

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location("gen_events", FIXTURES / "gen_events.py")
assert _spec is not None and _spec.loader is not None
gen_events = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_events)

BUCKET = "train-audit-logs"
NOV = "cloudaudit.googleapis.com/system_event/2026/11/03/00:00:00_00:59:59_S0.json"
OCT = "cloudaudit.googleapis.com/system_event/2026/10/07/13:00:00_13:59:59_S0.json"
(BAD,) = gen_events.pull_objects()["gcp_bad"]
INSTANCE = "//compute.googleapis.com/projects/train-prj-1/zones/us-central1-a/instances/4071234567890123456"


@pytest.fixture
def gcs(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeGcs]:
    srv = FakeGcs(page_size=1).start()
    srv.put(BUCKET, NOV, (FIXTURES / "events" / "gcp" / NOV).read_bytes())
    for name, body in gen_events.pull_objects()["gcp"].items():
        srv.put(BUCKET, name, body)
    monkeypatch.setenv("STORAGE_EMULATOR_HOST", srv.url)
    monkeypatch.delenv("GOOGLE_APPLICATION_CREDENTIALS", raising=False)
    try:
        yield srv
    finally:
        srv.stop()


def pull(tmp: Path, *args: str, db: Path | None = None) -> Result:
    return CliRunner().invoke(main, ["pull", "gcp-events", "--bucket", BUCKET, "--db", str(db or tmp / "events.duckdb"),
                                     "--cache", str(tmp / "cache"), *args])


def rows(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT provider, resource_id, time, kind, source_file, source_row FROM interruption_events "
                           "ORDER BY time").fetchall()
    finally:
        con.close()


def test_a_period_pull_stores_the_preemption_once_and_a_second_pull_fetches_nothing(gcs: FakeGcs, tmp_path: Path) -> None:
    r = pull(tmp_path, "--period", "2026-11")
    assert r.exit_code == 0, r.output
    expected = [("gcp", INSTANCE, datetime(2026, 11, 3, 0, 20, 7, 123456), "preemption", f"gs://{BUCKET}/{NOV}", 1)]
    assert rows(tmp_path / "events.duckdb") == expected
    assert gcs.downloads() == [NOV]  # October's object never went over the wire
    pages = gcs.listings()
    assert len(pages) == 2 and pages[1].query["pageToken"] == ["1"]  # both objects listed, one per page
    assert pages[0].query["prefix"] == ["cloudaudit.googleapis.com/system_event/"]
    assert (f"gs://{BUCKET}/{NOV}: 1 record(s) are not interruption events (GCP Cloud Audit Logs entries); not kept"
            in r.stderr)
    assert (tmp_path / "cache" / BUCKET / NOV).read_bytes() == (FIXTURES / "events" / "gcp" / NOV).read_bytes()

    again = pull(tmp_path, "--period", "2026-11")
    assert again.exit_code == 0, again.output
    assert gcs.downloads() == [NOV]
    assert f"gs://{BUCKET}/cloudaudit.googleapis.com/system_event: 0 object(s) downloaded (0 bytes), 1 unchanged" \
        in again.stderr
    assert rows(tmp_path / "events.duckdb") == expected

    # a new generation of the object (rewritten, same bytes): fetched again, its event already held
    gcs.put(BUCKET, NOV, (FIXTURES / "events" / "gcp" / NOV).read_bytes())
    third = pull(tmp_path, "--period", "2026-11")
    assert third.exit_code == 0, third.output
    assert gcs.downloads() == [NOV, NOV]
    assert "1 event file(s) read (1 interruption events: 0 new, 1 already held)" in third.stderr
    assert rows(tmp_path / "events.duckdb") == expected


def test_every_date_without_a_period_and_a_bad_object_named_by_its_key(gcs: FakeGcs, tmp_path: Path) -> None:
    for name, body in gen_events.pull_objects()["gcp_bad"].items():
        gcs.put(BUCKET, name, body)
    r = pull(tmp_path)
    assert r.exit_code == 2
    assert f"error: gs://{BUCKET}/{BAD}: not an interruption event file" in r.stderr
    assert "Traceback" not in r.output
    assert [(x[1].rsplit("/", 1)[1], x[2]) for x in rows(tmp_path / "events.duckdb")] == [
        ("4071234567890999999", datetime(2026, 10, 7, 13, 40)), ("4071234567890123456", datetime(2026, 11, 3, 0, 20, 7, 123456))]
    assert sorted(gcs.downloads()) == sorted([NOV, OCT, BAD])


def test_dry_run_lists_names_and_sizes_and_writes_nothing(gcs: FakeGcs, tmp_path: Path) -> None:
    size = len((FIXTURES / "events" / "gcp" / NOV).read_bytes())
    r = pull(tmp_path, "--period", "2026-11", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        f"gs://{BUCKET}/cloudaudit.googleapis.com/system_event, 2026-11: 1 object(s), {size:,} bytes; 1 to fetch "
        f"({size:,} bytes); 1 dated outside it not fetched",
        f"    fetch  {NOV} ({size:,} bytes)"]
    assert gcs.downloads() == []
    assert not (tmp_path / "events.duckdb").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_a_dropped_download_resumes_with_a_range(gcs: FakeGcs, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from connectors.gcp import events_pull

    monkeypatch.setattr(events_pull, "CHUNK", 500)  # 8 MiB in real use
    size = len((FIXTURES / "events" / "gcp" / NOV).read_bytes())
    assert size > 1000
    gcs.drop_after[NOV] = (2, 300)  # the second ranged GET is cut after 300 of its 500 bytes
    r = pull(tmp_path, "--period", "2026-11")
    assert r.exit_code == 0, r.output
    ranges = [x.range for x in gcs.log if x.query.get("alt") == ["media"]]
    # the first chunk stays in the .part file: the cut chunk is asked for again, and the rest after it
    assert ranges == ["bytes=0-499", "bytes=500-999", "bytes=500-999",
                      *(f"bytes={lo}-{min(lo + 499, size - 1)}" for lo in range(1000, size, 500))]
    assert (tmp_path / "cache" / BUCKET / NOV).read_bytes() == (FIXTURES / "events" / "gcp" / NOV).read_bytes()
    assert len(rows(tmp_path / "events.duckdb")) == 1


def test_access_denied_and_a_missing_bucket_are_one_clear_line(gcs: FakeGcs, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["pull", "gcp-events", "--bucket", "no-such-bucket", "--db", str(tmp_path / "e.duckdb"),
                                  "--cache", str(tmp_path / "cache")])
    assert r.exit_code == 2
    assert r.stderr.strip() == "error: bucket gs://no-such-bucket does not exist (HTTP 404); check --bucket"
    gcs.deny = True
    r = pull(tmp_path, "--period", "2026-11")
    assert r.exit_code == 2
    assert ("access denied (listing gs://train-audit-logs/cloudaudit.googleapis.com/system_event, HTTP 403): the "
            "credentials need roles/storage.objectViewer on the bucket (storage.objects.list, storage.objects.get)"
            in r.stderr)
    assert "Traceback" not in r.output and not (tmp_path / "events.duckdb").exists()
