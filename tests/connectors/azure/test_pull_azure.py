"""`billing-audit pull azure` against Azurite (real Blob Storage emulator) and a Cost Management fake.

The fake ARM server speaks https with a certificate made by the test, and the real
CostManagementClient talks to it with a bearer token; Azurite sits behind a TCP proxy that
logs every request and can drop a connection mid-download.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner

import billing_audit
from billing_audit.cli import main
from billing_audit.config import load_config
from billing_audit.report import build_report
from connectors.azure import pull as ap
from peers_azure import (
    ACCOUNT,
    DEV_KEY,
    ArmFake,
    Azurite,
    CutProxy,
    FakeCredential,
    connection_string,
    seed,
)
from support import FIXTURES, report_body

pytestmark = pytest.mark.slow

AZ = FIXTURES / "azure"
CONTAINER = "costexports"
SNAP = "ea/20261001-20261031/gpu-ea-daily"
RUN3 = f"{SNAP}/202611020300/33333333-0000-4000-8000-00000000aaa3"


# -- peers ----------------------------------------------------------------------------


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


_n = 0


@pytest.fixture
def container(azurite: Azurite) -> Iterator[str]:
    """A fresh container per test (Azurite stays up for the module)."""
    from azure.storage.blob import BlobServiceClient

    global _n
    _n += 1
    name = f"costexports{_n}"
    svc = BlobServiceClient.from_connection_string(connection_string(azurite.port))
    svc.create_container(name)
    try:
        yield name
    finally:
        svc.delete_container(name)


def _svc(azurite: Azurite) -> Any:
    from azure.storage.blob import BlobServiceClient

    return BlobServiceClient.from_connection_string(connection_string(azurite.port))


def _seed(azurite: Azurite, container: str, *cases: str) -> None:
    for case in cases:
        seed(_svc(azurite), container, AZ / case / CONTAINER)


@pytest.fixture
def arm(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[ArmFake]:
    fake = ArmFake(tmp_path).start()
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(fake.cert))  # trust the test's certificate, as for a proxy CA
    monkeypatch.setattr(ap, "default_credential", lambda: FakeCredential())
    try:
        yield fake
    finally:
        fake.stop()


def _pull(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> Any:
    return CliRunner().invoke(
        main,
        ["pull", "azure", *args, "--cache", str(tmp_path / "cache"), "--db", str(tmp_path / "pulled.duckdb")],
        env=env,
    )


def _figures(db: Path) -> dict[str, Any]:
    with billing_audit.open(db) as store:
        summary = store.summary().sort(["provider", "period", "currency"]).to_dicts()
        sums = store.sql(
            "SELECT x_Provider, BillingAccountId, strftime(BillingPeriodStart, '%Y-%m') AS period, BillingCurrency, "
            "count(*) AS n, sum(BilledCost) AS billed, sum(EffectiveCost) AS effective, sum(ListCost) AS list "
            "FROM line_items GROUP BY ALL ORDER BY ALL"
        ).to_dicts()
        store.tag()
        report = report_body(build_report(store, load_config(None)).to_dict())  # without the clock's generated_at
    return {"summary": summary, "sums": sums, "report": report}


def _local(tmp_path: Path, *cases: str) -> dict[str, Any]:
    db = tmp_path / "local.duckdb"
    with billing_audit.open(db) as store:
        rep = store.ingest([AZ / c for c in cases])
        assert not rep.errors, rep.errors
    return _figures(db)


def _all_text(tmp_path: Path, result: Any) -> str:
    """Everything a secret could leak into: output, the cache folder, the store."""
    parts = [result.output, result.stderr if hasattr(result, "stderr") else ""]
    for f in (tmp_path / "cache").rglob("*"):
        if f.is_file():
            parts.append(f.read_bytes().decode("latin-1"))
    db = tmp_path / "pulled.duckdb"
    if db.exists():
        parts.append(db.read_bytes().decode("latin-1"))
        with billing_audit.open(db) as store:
            for t in ("ingest_log", "deliveries"):
                parts.append(json.dumps(store.sql(f"SELECT * FROM {t}").to_dicts(), default=str))
    return "\n".join(parts)


def _cs(proxy: CutProxy) -> dict[str, str]:
    return {"AZURE_STORAGE_CONNECTION_STRING": connection_string(proxy.port)}


# -- read an export folder directly ---------------------------------------------------


ALL_CASES = ("ea-actual-csv", "mca-actual-csv-gz", "snapshots", "ea-legacy-manifest", "ea-old-parquet")


def test_container_pull_equals_local_ingest_and_second_pull_downloads_nothing(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str
) -> None:
    _seed(azurite, container, *ALL_CASES)
    r = _pull(tmp_path, "--container", container, env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert "fetched 10 file(s)" in r.output

    # only the newest of the three October snapshots: the older runs' data is never read
    data_gets = [g.path for g in proxy.gets(f"/{container}/{SNAP}/") if "manifest" not in g.path]
    assert data_gets and all("33333333" in p for p in data_gets), data_gets
    assert _figures(tmp_path / "pulled.duckdb") == _local(tmp_path, *ALL_CASES)

    state = json.loads((tmp_path / "cache" / ACCOUNT / container / ".pull-state.json").read_text())
    assert len(state) == 10 and not any("11111111" in k or "22222222" in k for k in state)

    proxy.log.clear()
    r = _pull(tmp_path, "--container", container, env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert proxy.gets() == [], "a second pull with nothing new downloaded something"
    assert "fetched 0 file(s)" in r.output and "unchanged" in r.output


def test_newest_run_is_chosen_by_the_manifest_period_not_the_path(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str
) -> None:
    """A newer run filed under a misleading folder still counts for the month its manifest names."""
    _seed(azurite, container, "snapshots")
    src = AZ / "snapshots" / CONTAINER / RUN3
    manifest = json.loads((src / "manifest.json").read_text())
    folder = "ea/misfiled/gpu-ea-daily/202611050300/44444444-0000-4000-8000-00000000aaa4"
    manifest["runInfo"].update(runId="44444444-0000-4000-8000-00000000aaa4", submittedTime="2026-11-05T03:00:00Z")
    manifest["blobs"] = [{"blobName": f"{folder}/part_0_0001.csv", "byteCount": 10150}]
    cc = _svc(azurite).get_container_client(container)
    cc.upload_blob(f"{folder}/manifest.json", json.dumps(manifest))
    cc.upload_blob(f"{folder}/part_0_0001.csv", (src / "part_0_0001.csv").read_bytes())
    r = _pull(tmp_path, "--container", container, "--dry-run", env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert "2026-10  gpu-ea-daily run 44444444" in r.output and "newest of 4 runs" in r.output
    assert not list((tmp_path / "cache").rglob("*.csv")), "--dry-run downloaded data"
    assert not (tmp_path / "pulled.duckdb").exists()


def test_period_and_export_filters(tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str) -> None:
    _seed(azurite, container, *ALL_CASES)
    r = _pull(tmp_path, "--container", container, "--period", "2026-09", "--dry-run", env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert "2026-09  gpu-labs-legacy" in r.output and "2026-10  " not in r.output
    r = _pull(tmp_path, "--container", container, "--export", "gpu-mca-actual", "--path", "mca", env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert _figures(tmp_path / "pulled.duckdb")["sums"] == _local(tmp_path, "mca-actual-csv-gz")["sums"]
    r = _pull(tmp_path, "--container", container, "--period", "2026-13", env=_cs(proxy))
    assert r.exit_code == 2 and "YYYY-MM" in r.output


# -- through Cost Management ----------------------------------------------------------


def _runs(arm: ArmFake, azurite: Azurite, container: str) -> None:
    """gpu-ea-daily with many October runs, a newer failed and a running one; two more exports."""
    arm.add_export("gpu-ea-daily", container, "ea")
    for stamp, rid in [("202610110300", "11111111-0000-4000-8000-00000000aaa1"),
                       ("202610210300", "22222222-0000-4000-8000-00000000aaa2"),
                       ("202611020300", "33333333-0000-4000-8000-00000000aaa3")]:
        t = datetime.strptime(stamp, "%Y%m%d%H%M").replace(tzinfo=UTC)
        arm.add_run("gpu-ea-daily", rid, "Completed", t.isoformat().replace("+00:00", "Z"),
                    "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z",
                    manifest=f"{SNAP}/{stamp}/{rid}/manifest.json")
    # more daily snapshots of the same month, made here from run 1's files
    cc = _svc(azurite).get_container_client(container)
    src = AZ / "snapshots" / CONTAINER / f"{SNAP}/202610110300/11111111-0000-4000-8000-00000000aaa1"
    for day in range(12, 20):
        rid = f"{day:08d}-0000-4000-8000-0000000000{day:02d}"
        stamp = f"202610{day:02d}0300"
        folder = f"{SNAP}/{stamp}/{rid}"
        m = json.loads((src / "manifest.json").read_text())
        m["runInfo"].update(runId=rid, submittedTime=f"2026-10-{day:02d}T03:00:00Z")
        m["blobs"] = [{"blobName": f"{folder}/part_0_0001.csv", "byteCount": 7617}]
        cc.upload_blob(f"{folder}/manifest.json", json.dumps(m))
        cc.upload_blob(f"{folder}/part_0_0001.csv", (src / "part_0_0001.csv").read_bytes())
        arm.add_run("gpu-ea-daily", rid, "Completed", f"2026-10-{day:02d}T03:00:00Z", "2026-10-01T00:00:00Z",
                    "2026-10-31T00:00:00Z", manifest=f"{folder}/manifest.json")
    # a newer failed run that left a partial folder behind, and one still running
    bad = f"{SNAP}/202611030300/55555555-0000-4000-8000-00000000bad1"
    cc.upload_blob(f"{bad}/part_0_0001.csv", b"BillingAccountId,Date\n1,2026-10-01\n")
    arm.add_run("gpu-ea-daily", "55555555-0000-4000-8000-00000000bad1", "Failed", "2026-11-03T03:00:00Z",
                "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z", file_name=f"{bad}/")
    arm.add_run("gpu-ea-daily", "66666666-0000-4000-8000-00000000bad2", "InProgress", "2026-11-04T03:00:00Z",
                "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z")
    # only fileName (the run folder): the manifest is found beside it
    arm.add_export("gpu-ea-actual", container, "ea")
    arm.add_run("gpu-ea-actual", "6c1e9f40-0000-4000-8000-00000000e001", "Completed", "2026-11-02T05:12:43Z",
                "2026-10-01T00:00:00Z", "2026-10-31T00:00:00Z",
                file_name="ea/20261001-20261031/gpu-ea-actual/202611020512/6c1e9f40-0000-4000-8000-00000000e001/")
    # neither, nor a start date: the destination's root folder and the run id find the (legacy) manifest,
    # which names the month
    arm.add_export("gpu-labs-legacy", container, "labs-legacy")
    arm.add_run("gpu-labs-legacy", "e2f3a4b5-0000-4000-8000-0000000000f1", "Completed", "2026-10-03T02:01:55Z",
                None, None)


def test_scope_pull_downloads_only_the_newest_completed_run(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str, arm: ArmFake
) -> None:
    _seed(azurite, container, "snapshots", "ea-actual-csv", "ea-legacy-manifest")
    _runs(arm, azurite, container)
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url, env=_cs(proxy))
    assert r.exit_code == 0, r.output

    daily = [g.path for g in proxy.gets(f"/{container}/{SNAP}/")]
    assert daily and all("33333333" in p for p in daily), daily  # 11 completed runs, a failed one: only run 3
    assert any(p.endswith("aaa3/part_0_0001.csv") for p in daily)
    assert any("runHistory" in p for p in arm.log)
    assert _figures(tmp_path / "pulled.duckdb") == _local(tmp_path, "snapshots", "ea-actual-csv", "ea-legacy-manifest")

    proxy.log.clear()
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url, env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert proxy.gets() == [] and "fetched 0 file(s)" in r.output


def test_scope_filters_and_unknown_export(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str, arm: ArmFake
) -> None:
    _seed(azurite, container, "snapshots", "ea-actual-csv", "ea-legacy-manifest")
    _runs(arm, azurite, container)
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url, "--export", "gpu-ea-daily",
              "--period", "2026-10", "--dry-run", env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert "gpu-ea-daily run 33333333" in r.output and "gpu-ea-actual" not in r.output
    assert proxy.gets("part_") == []
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url, "--export", "nope", env=_cs(proxy))
    assert r.exit_code == 2
    assert "export 'nope' not found" in r.output and "gpu-ea-daily" in r.output
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url, "--period", "2025-01", env=_cs(proxy))
    assert r.exit_code == 2 and "no completed export run for 2025-01" in r.output


def test_arm_503_then_success_is_retried(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str, arm: ArmFake
) -> None:
    _seed(azurite, container, "snapshots", "ea-actual-csv", "ea-legacy-manifest")
    _runs(arm, azurite, container)
    arm.fail_next = [503, 503]
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url, "--export", "gpu-ea-daily", env=_cs(proxy))
    assert r.exit_code == 0, r.output
    lists = [p for p in arm.log if p.split("?")[0].endswith("/exports")]
    assert len(lists) == 3  # two 503s, then the answer
    assert _figures(tmp_path / "pulled.duckdb")["sums"] == _local(tmp_path, "snapshots")["sums"]


def test_arm_access_denied_is_one_clear_message(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str, arm: ArmFake
) -> None:
    arm.deny = True
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url, env=_cs(proxy))
    assert r.exit_code == 2
    assert "access denied" in r.output and "AuthorizationFailed" in r.output and "Cost Management Reader" in r.output
    assert "Traceback" not in r.output
    assert not (tmp_path / "pulled.duckdb").exists()


def test_no_credentials_is_one_clear_message(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, arm: ArmFake) -> None:
    from azure.identity import CredentialUnavailableError

    class NoCredential:
        def get_token(self, *a: Any, **k: Any) -> Any:
            raise CredentialUnavailableError("DefaultAzureCredential failed to retrieve a token")

    monkeypatch.setattr(ap, "default_credential", lambda: NoCredential())
    r = _pull(tmp_path, "--scope", arm.scope, "--arm-endpoint", arm.url)
    assert r.exit_code == 2, r.output
    assert "no usable Azure credentials" in r.output and "az login" in r.output


# -- faults ---------------------------------------------------------------------------


def test_connection_dropped_mid_download_resumes_with_a_range(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    _seed(azurite, container, "snapshots")
    monkeypatch.setattr(ap, "CHUNK", 2048)  # 8 MiB in real use; the fixture file is 10,150 bytes
    proxy.cut("aaa3/part_0_0001.csv", after=1200, times=2, skip=2)  # the 3rd and 4th GET die mid-body
    r = _pull(tmp_path, "--container", container, env=_cs(proxy))
    assert r.exit_code == 0, r.output
    assert proxy.cuts_done == 2
    starts = [int(g.range.split("=")[1].split("-")[0]) for g in proxy.gets("aaa3/part_0_0001.csv")]
    assert starts == [0, 2048, 4096, 4096, 4096, 6144, 8192], starts  # resumed at 4096, never from 0
    local = tmp_path / "cache" / ACCOUNT / container / RUN3 / "part_0_0001.csv"
    assert local.read_bytes() == (AZ / "snapshots" / CONTAINER / RUN3 / "part_0_0001.csv").read_bytes()
    assert not list(local.parent.glob("*.part*"))
    assert _figures(tmp_path / "pulled.duckdb")["sums"] == _local(tmp_path, "snapshots")["sums"]


@pytest.mark.parametrize("same_version", [True, False])
def test_partial_file_of_an_earlier_pull_is_resumed_only_for_the_same_blob_version(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str, same_version: bool
) -> None:
    _seed(azurite, container, "snapshots")
    src = (AZ / "snapshots" / CONTAINER / RUN3 / "part_0_0001.csv").read_bytes()
    etag = _svc(azurite).get_blob_client(container, f"{RUN3}/part_0_0001.csv").get_blob_properties().etag
    dest = tmp_path / "cache" / ACCOUNT / container / RUN3 / "part_0_0001.csv"
    dest.parent.mkdir(parents=True)
    dest.with_name(dest.name + ".part").write_bytes(src[:6000] if same_version else b"x" * 6000)
    dest.with_name(dest.name + ".part-etag").write_text(etag if same_version else '"0x8DEADBEEF"')
    r = _pull(tmp_path, "--container", container, env=_cs(proxy))
    assert r.exit_code == 0, r.output
    last = len(src) - 1  # the part file's last byte (10119 for the fixture)
    assert last == 10119
    want = f"bytes=6000-{last}" if same_version else f"bytes=0-{last}"
    assert [g.range for g in proxy.gets("aaa3/part_0_0001.csv")] == [want]
    assert dest.read_bytes() == src


def test_cache_folder_holds_only_chosen_runs_for_a_later_ingest(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str
) -> None:
    """Manifests read while planning are not left where `billing-audit ingest CACHE` would take them."""
    _seed(azurite, container, "snapshots")
    assert _pull(tmp_path, "--container", container, env=_cs(proxy)).exit_code == 0
    with billing_audit.open(tmp_path / "again.duckdb") as store:
        rep = store.ingest([tmp_path / "cache"])
        assert not rep.errors, rep.errors
        assert rep.count("ingested") == 1


def test_bad_sas_is_access_denied_and_never_printed(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str
) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    _seed(azurite, container, "snapshots")
    wrong_key = "d3Jvbmcta2V5LXdyb25nLWtleS13cm9uZy1rZXktd3Jvbmcta2V5LXdyb25nLWtleQ=="
    sas = generate_container_sas(ACCOUNT, container, account_key=wrong_key,
                                 permission=ContainerSasPermissions(read=True, list=True),
                                 expiry=datetime.now(UTC) + timedelta(hours=1))
    sig = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    url = f"http://127.0.0.1:{proxy.port}/{ACCOUNT}/{container}?{sas}"
    r = _pull(tmp_path, "--storage-url", url)
    assert r.exit_code == 2, r.output
    assert "access denied" in r.output and "SAS" in r.output and "Traceback" not in r.output
    text = _all_text(tmp_path, r)
    assert sig not in text and sas not in text


def test_secrets_in_connection_string_and_sas_never_leak(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str
) -> None:
    from azure.storage.blob import ContainerSasPermissions, generate_container_sas

    _seed(azurite, container, "snapshots")
    sas = generate_container_sas(ACCOUNT, container, account_key=DEV_KEY,
                                 permission=ContainerSasPermissions(read=True, list=True),
                                 expiry=datetime.now(UTC) + timedelta(hours=1))
    sig = dict(p.split("=", 1) for p in sas.split("&"))["sig"]
    r = _pull(tmp_path, "--storage-url", f"http://127.0.0.1:{proxy.port}/{ACCOUNT}/{container}/ea?{sas}")
    assert r.exit_code == 0, r.output
    assert "1 file(s) ingested" in r.output
    r2 = _pull(tmp_path, "--connection-string", connection_string(proxy.port), "--container", container,
               "--export", "nope")
    assert r2.exit_code == 2 and "export 'nope' not found" in r2.output
    # an unreachable endpoint: its error text would carry the URL, with the SAS
    r3 = _pull(tmp_path, "--storage-url", f"http://127.0.0.1:9/{ACCOUNT}/{container}?{sas}")
    assert r3.exit_code == 2 and "still failing" in r3.output
    for res in (r, r2, r3):
        text = _all_text(tmp_path, res)
        assert DEV_KEY not in text and sig not in text and sas not in text


def test_manifest_listing_a_missing_blob_ingests_nothing_of_that_period(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str
) -> None:
    _seed(azurite, container, "snapshots", "mca-actual-csv-gz")
    cc = _svc(azurite).get_container_client(container)
    cc.delete_blob(f"{RUN3}/part_0_0001.csv")  # the newest run's data is gone; its manifest still lists it
    r = _pull(tmp_path, "--container", container, env=_cs(proxy))
    assert r.exit_code == 2
    assert "lists 1 blob(s) that are not in" in r.output and "aaa3/part_0_0001.csv" in r.output
    assert not [g for g in proxy.gets(SNAP) if "part_" in g.path]  # manifests read, no data of any run
    figures = _figures(tmp_path / "pulled.duckdb")
    assert figures["sums"] == _local(tmp_path, "mca-actual-csv-gz")["sums"]  # the other export still came in
    assert not any(s["BillingAccountId"] == "65432100" for s in figures["sums"])  # no older snapshot instead


def test_manifest_blob_name_climbing_out_is_refused(
    tmp_path: Path, azurite: Azurite, proxy: CutProxy, container: str
) -> None:
    _seed(azurite, container, "snapshots")
    cc = _svc(azurite).get_container_client(container)
    m = json.loads((AZ / "snapshots" / CONTAINER / RUN3 / "manifest.json").read_text())
    m["blobs"].append({"blobName": "../../../../outside/evil.csv", "byteCount": 10})
    cc.upload_blob(f"{RUN3}/manifest.json", json.dumps(m), overwrite=True)
    r = _pull(tmp_path, "--container", container, env=_cs(proxy))
    assert r.exit_code == 2
    assert "refusing object key '../../../../outside/evil.csv'" in r.output
    assert not list((tmp_path / "cache").rglob("*.csv")) and not (tmp_path / "outside").exists()
    assert not [g for g in proxy.gets() if "part_" in g.path]
    with billing_audit.open(tmp_path / "pulled.duckdb") as store:
        assert store.sql("SELECT count(*) AS n FROM line_items")["n"][0] == 0


# -- pure parts -----------------------------------------------------------------------


def _run(rid: str, status: str, day: int, period: str = "2026-10") -> Any:
    return ap._Run("e", rid, status, datetime(2026, 11, day, tzinfo=UTC), period, "", "", "c", "", "a")


def test_a_newer_failed_run_never_wins() -> None:
    runs = [_run("ok1", "Completed", 1), _run("ok2", "Completed", 2), _run("bad", "Failed", 3),
            _run("busy", "InProgress", 4), _run("sep", "Completed", 5, "2026-09"), _run("x", "Completed", 6, "")]
    chosen, unknown = ap.newest_completed(runs)
    assert [(r.run_id, r.period) for r in chosen] == [("sep", "2026-09"), ("ok2", "2026-10")]
    assert [r.run_id for r in unknown] == ["x"]
    assert [r.run_id for r in ap.newest_completed(runs, ["2026-10"])[0]] == ["ok2"]


def test_storage_url_parsing_and_redaction() -> None:
    base, acct, cont, path, sas = ap.parse_storage_url(
        "https://acct.blob.core.windows.net/costexports/ea/x?sv=2024-01-01&sp=rl&sig=c2VjcmV0c2lnbmF0dXJlMTIzNDU2Nzg5MA%3D")
    assert (base, acct, cont, path) == ("https://acct.blob.core.windows.net", "acct", "costexports", "ea/x")
    assert sas and "sig=" in sas
    assert "c2VjcmV0" not in ap.redact(f"GET ...?{sas} failed")
    assert ap.parse_storage_url("http://127.0.0.1:10000/devstoreaccount1/c")[:3] == (
        "http://127.0.0.1:10000/devstoreaccount1", "devstoreaccount1", "c")
    assert ap.redact("DefaultEndpointsProtocol=https;AccountName=a;AccountKey=abc/def==;") == (
        "DefaultEndpointsProtocol=https;AccountName=a;AccountKey=***;")

