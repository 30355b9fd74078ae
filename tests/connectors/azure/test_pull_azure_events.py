"""`billing-audit pull azure-events` against Azurite (tests/peers_azure.py): the container a diagnostic setting
writes, ``insights-activity-logs``, with the scenario's Activity Log blob (fixtures/events/scenarios, by
fixtures/gen_events.py) and gen_events.pull_objects()'s October blob.

By hand, --period 2026-11: the blob of 2026-11-02 hour 00 holds two Resource Health "preempted" records (05:00 and
14:30, a100-spot-2) and one administrative write (no event): two evictions.  The October blob (an eviction of
a100-spot-9 on 2026-10-15) is not fetched.
"""

from __future__ import annotations

import importlib.util
import json
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb
import pytest
from click.testing import CliRunner, Result

import billing_audit
from billing_audit.cli import main
from peers_azure import ACCOUNT, DEV_KEY, Azurite, CutProxy, connection_string
from support import FIXTURES

_spec = importlib.util.spec_from_file_location("gen_events", FIXTURES / "gen_events.py")
assert _spec is not None and _spec.loader is not None
gen_events = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen_events)

pytestmark = pytest.mark.slow

CONTAINER = "insights-activity-logs"
SUB = "5A5A5A5A-0000-4000-8000-00000000EU01"
BLOB = f"resourceId=/SUBSCRIPTIONS/{SUB}/y=2026/m=11/d=02/h=00/m=00/PT1H.json"
OCTOBER = f"resourceId=/SUBSCRIPTIONS/{SUB}/y=2026/m=10/d=15/h=03/m=00/PT1H.json"
(BAD,) = gen_events.pull_objects()["azure_bad"]
SCEN = FIXTURES / "events" / "scenarios" / "azure-activity-log" / CONTAINER


@pytest.fixture(scope="module")
def azurite() -> Iterator[Azurite]:
    a = Azurite().start()
    try:
        yield a
    finally:
        a.stop()


@pytest.fixture
def proxy(azurite: Azurite) -> Iterator[CutProxy]:
    p = CutProxy(azurite.port).start()
    try:
        yield p
    finally:
        p.stop()


def _container(azurite: Azurite) -> Any:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string(azurite.port)).get_container_client(CONTAINER)


@pytest.fixture
def seeded(azurite: Azurite) -> Iterator[Any]:
    cc = _container(azurite)
    cc.create_container()
    cc.upload_blob(BLOB, (SCEN / BLOB).read_bytes())
    for name, body in gen_events.pull_objects()["azure"].items():
        cc.upload_blob(name, body)
    try:
        yield cc
    finally:
        cc.delete_container()


def pull(proxy: CutProxy, tmp: Path, *args: str, db: Path | None = None) -> Result:
    return CliRunner().invoke(main, ["pull", "azure-events", "--db", str(db or tmp / "events.duckdb"),
                                     "--cache", str(tmp / "cache"), *args],
                              env={"AZURE_STORAGE_CONNECTION_STRING": connection_string(proxy.port)})


def rows(db: Path) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(db), read_only=True)
    try:
        return con.execute("SELECT provider, resource_id, time, kind, source_file FROM interruption_events "
                           "ORDER BY time").fetchall()
    finally:
        con.close()


def url(proxy: CutProxy, name: str) -> str:
    return f"http://127.0.0.1:{proxy.port}/{ACCOUNT}/{CONTAINER}/{name}"


def blob_gets(proxy: CutProxy) -> list[str]:
    return [r.path for r in proxy.gets() if r.method == "GET" and "comp=list" not in r.path]


def test_a_period_pull_stores_the_evictions_once_and_a_second_pull_fetches_nothing(seeded: Any, proxy: CutProxy,
                                                                                   tmp_path: Path) -> None:
    r = pull(proxy, tmp_path, "--period", "2026-11", "--subscription", SUB.lower())
    assert r.exit_code == 0, r.output
    expected = [("azure", gen_events.AZ_VM, datetime(2026, 11, 2, 5), "eviction", url(proxy, BLOB)),
                ("azure", gen_events.AZ_VM, datetime(2026, 11, 2, 14, 30), "eviction", url(proxy, BLOB))]
    assert rows(tmp_path / "events.duckdb") == expected
    assert len(blob_gets(proxy)) == 1 and "m%3D11" in blob_gets(proxy)[0].replace("=", "%3D")  # October not fetched
    assert (f"{url(proxy, BLOB)}: 1 record(s) are not interruption events (Azure Activity Log records); not kept"
            in r.stderr)
    assert "1 event file(s) read (2 interruption events: 2 new, 0 already held)" in r.stderr
    assert DEV_KEY not in r.output

    again = pull(proxy, tmp_path, "--period", "2026-11")
    assert again.exit_code == 0, again.output
    assert len(blob_gets(proxy)) == 1  # nothing downloaded
    assert "0 object(s) downloaded (0 bytes), 1 unchanged in the cache" in again.stderr
    assert "1 unchanged since they were read (not read again)" in again.stderr
    assert rows(tmp_path / "events.duckdb") == expected

    # the current hour's blob grows (an append blob until the hour ends): fetched again, only the new record stored
    grown = (SCEN / BLOB).read_bytes() + gen_events.lines([gen_events.activity_record(
        "2026-11-02T00:50:00.0000000Z", gen_events.AZ_VM, "Microsoft.Compute/virtualMachines/evict/action",
        "Administrative", {"statusCode": "OK"})]).encode()
    seeded.upload_blob(BLOB, grown, overwrite=True)
    third = pull(proxy, tmp_path, "--period", "2026-11")
    assert third.exit_code == 0, third.output
    assert "1 event file(s) read (3 interruption events: 1 new, 2 already held)" in third.stderr
    assert [t for _, _, t, _, _ in rows(tmp_path / "events.duckdb")] == [
        datetime(2026, 11, 2, 0, 50), datetime(2026, 11, 2, 5), datetime(2026, 11, 2, 14, 30)]


def test_a_blob_that_is_no_event_file_is_named_and_nothing_of_it_is_stored(seeded: Any, proxy: CutProxy,
                                                                          tmp_path: Path) -> None:
    for name, body in gen_events.pull_objects()["azure_bad"].items():
        seeded.upload_blob(name, body)
    r = pull(proxy, tmp_path, "--period", "2026-11")
    assert r.exit_code == 2
    assert f"error: {url(proxy, BAD)}: not an interruption event file" in r.stderr
    assert [x[4] for x in rows(tmp_path / "events.duckdb")] == [url(proxy, BLOB)] * 2


def test_dry_run_lists_blobs_and_sizes_and_writes_nothing(seeded: Any, proxy: CutProxy, tmp_path: Path) -> None:
    size = len((SCEN / BLOB).read_bytes())
    r = pull(proxy, tmp_path, "--period", "2026-11", "--dry-run")
    assert r.exit_code == 0, r.output
    assert r.stdout.splitlines() == [
        f"http://127.0.0.1:{proxy.port}/{ACCOUNT}/{CONTAINER}, 2026-11: 1 object(s), {size:,} bytes; 1 to fetch "
        f"({size:,} bytes); 1 dated outside it not fetched",
        f"    fetch  {BLOB} ({size:,} bytes)"]
    assert not blob_gets(proxy)
    assert not (tmp_path / "events.duckdb").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


def test_no_credentials_and_an_empty_subscription_are_clear(seeded: Any, proxy: CutProxy, tmp_path: Path) -> None:
    r = CliRunner().invoke(main, ["pull", "azure-events", "--db", str(tmp_path / "e.duckdb")], env={
        "AZURE_STORAGE_CONNECTION_STRING": ""})
    assert r.exit_code == 2 and "give --account-url, --storage-url or --connection-string" in r.stderr
    r = pull(proxy, tmp_path, "--subscription", "00000000-0000-4000-8000-000000000000")
    assert r.exit_code == 2
    assert ("nothing under http://127.0.0.1:" in r.stderr
            and "resourceId=/SUBSCRIPTIONS/00000000-0000-4000-8000-000000000000: check the bucket / container and --prefix"
            in r.stderr)


def test_the_reconciliation_after_a_pull_matches_the_azure_fee(seeded: Any, proxy: CutProxy, tmp_path: Path) -> None:
    """The scenario's Azure Spot Restart Fee (2 x 0.07 EUR, a100-spot-2, 2026-11-02) is matched by the pulled
    evictions: no Azure fee is disputable, as with the event files read locally."""
    db = tmp_path / "events.duckdb"
    with billing_audit.open(db) as store:
        assert not store.ingest([FIXTURES / "scenarios"]).errors
        store.tag()
    before = CliRunner().invoke(main, ["search", "--db", str(db), "--fees-without-events", "--period", "2026-11",
                                       "--provider", "azure", "--format", "json"])
    doc = json.loads(before.stdout)
    assert (doc["providers_reconciled"], [n["provider"] for n in doc["not_reconciled"]]) == ([], ["azure"])
    assert pull(proxy, tmp_path, "--period", "2026-11", db=db).exit_code == 0
    after = CliRunner().invoke(main, ["search", "--db", str(db), "--fees-without-events", "--period", "2026-11",
                                      "--provider", "azure", "--format", "json"])
    assert after.exit_code == 0, after.output
    doc = json.loads(after.stdout)
    assert (doc["providers_reconciled"], doc["not_reconciled"], doc["fees_without_events"]) == (["azure"], [], [])
    assert (doc["events_held"], doc["totals"]) == (2, [{"currency": "EUR", "fee_lines": 1, "billed_cost": "0.14",
                                                       "fee_lines_disputed": 0, "disputable_amount": "0.00"}])


def test_a_sas_url_reads_the_container_and_the_sas_is_never_printed_nor_stored(seeded: Any, proxy: CutProxy,
                                                                              tmp_path: Path) -> None:
    from datetime import UTC, timedelta

    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    sas = generate_container_sas(ACCOUNT, CONTAINER, account_key=DEV_KEY,
                                 permission=ContainerSasPermissions(read=True, list=True),
                                 expiry=datetime.now(UTC) + timedelta(hours=1))
    sig = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    r = CliRunner().invoke(main, ["pull", "azure-events", "--storage-url",
                                  f"http://127.0.0.1:{proxy.port}/{ACCOUNT}/{CONTAINER}?{sas}", "--period", "2026-11",
                                  "--db", str(tmp_path / "events.duckdb"), "--cache", str(tmp_path / "cache")],
                           env={"AZURE_STORAGE_CONNECTION_STRING": ""})
    assert r.exit_code == 0, r.output
    assert [x[4] for x in rows(tmp_path / "events.duckdb")] == [url(proxy, BLOB)] * 2  # named without the SAS
    stored = (tmp_path / "events.duckdb").read_bytes().decode("latin-1")
    cached = "".join(p.read_bytes().decode("latin-1") for p in (tmp_path / "cache").rglob("*") if p.is_file())
    for text in (r.output, stored, cached):
        assert sig not in text and sas not in text
    wrong = generate_container_sas(ACCOUNT, CONTAINER, account_key=DEV_KEY.replace("E", "F", 1),
                                   permission=ContainerSasPermissions(read=True, list=True),
                                   expiry=datetime.now(UTC) + timedelta(hours=1))
    denied = CliRunner().invoke(main, ["pull", "azure-events", "--storage-url",
                                       f"http://127.0.0.1:{proxy.port}/{ACCOUNT}/{CONTAINER}?{wrong}",
                                       "--db", str(tmp_path / "denied.duckdb"), "--cache", str(tmp_path / "cache")],
                                env={"AZURE_STORAGE_CONNECTION_STRING": ""})
    assert denied.exit_code == 2 and "access denied" in denied.stderr and "Storage Blob Data Reader" in denied.stderr
    assert wrong not in denied.output and "Traceback" not in denied.output
