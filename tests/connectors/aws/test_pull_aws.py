"""`billing-audit pull aws` against real local peers: moto's S3 server behind a recording,
fault-injecting front that also speaks the cur and bcm-data-exports JSON 1.1 APIs (tests/peers_aws.py)."""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner, Result

import billing_audit
from billing_audit.cli import main
from billing_audit.config import load_config
from billing_audit.report import build_report
from peers_aws import AwsPeer, Fault
from support import FIXTURES, report_body

pytestmark = pytest.mark.slow

BILLING = "example-billing-bucket"  # the bucket the fixtures' manifests name
FOCUS = "example-focus-bucket"
SECRET = "wJalrXUtnFEMI-K7MDENG-bPxRfiCYPLANTEDSECRET"
TOKEN = "IQoJb3JpZ2luX2VjEPLANTEDSESSIONTOKEN0123456789"
LEGACY_OLD = "a1f0c5d2-0000-4000-8000-000000000001"
LEGACY_NEW = "b2e1d6c3-0000-4000-8000-000000000002"
CUR2_OLD = "20261002T041500Z"


@pytest.fixture(scope="module")
def peer_server() -> Iterator[AwsPeer]:
    logging.getLogger("werkzeug").setLevel(logging.ERROR)
    p = AwsPeer()
    try:
        yield p
    finally:
        p.stop()


@pytest.fixture
def peer(peer_server: AwsPeer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> AwsPeer:
    """A clean peer seeded with the fixtures under realistic keys, and planted dummy credentials."""
    peer_server.reset()
    for folder in ("aws/cur-legacy-csv", "aws/cur2-create-new", "aws/cur2", "aws/cur-legacy-parquet"):
        peer_server.seed(BILLING, FIXTURES / folder)
    peer_server.seed(FOCUS, FIXTURES / "focus/aws-focus-1.2")
    for var in ("AWS_PROFILE", "AWS_DEFAULT_PROFILE", "AWS_ENDPOINT_URL", "AWS_ENDPOINT_URL_S3"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "AKIAPLANTEDKEYID0000")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", SECRET)
    monkeypatch.setenv("AWS_SESSION_TOKEN", TOKEN)
    monkeypatch.setenv("AWS_DEFAULT_REGION", "us-east-1")
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "no-aws-config"))
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "no-aws-credentials"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    return peer_server


def pull(peer: AwsPeer, tmp: Path, *args: str, db: Path | None = None) -> Result:
    argv = ["pull", "aws", "--endpoint-url", peer.url, "--db", str(db or tmp / "pulled.duckdb"),
            "--cache", str(tmp / "cache"), *args]
    result = CliRunner().invoke(main, argv)
    text = result.output + (result.stderr if result.stderr_bytes is not None else "")
    assert SECRET not in text and TOKEN not in text, "a secret was printed"
    return result


def local_store(tmp: Path, *folders: str) -> Any:
    store = billing_audit.open(tmp / "local.duckdb")
    rep = store.ingest([FIXTURES / f for f in folders])
    assert not rep.errors, rep.errors
    return store


def totals(store: Any) -> list[tuple[Any, ...]]:
    return store.sql("SELECT x_Provider, BillingCurrency, count(*) AS n, sum(BilledCost) AS billed, "
                     "sum(EffectiveCost) AS eff, sum(ListCost) AS list FROM line_items GROUP BY ALL ORDER BY ALL").rows()


def report_json(store: Any) -> dict[str, Any]:
    store.tag()
    return json.loads(json.dumps(report_body(build_report(store, load_config(None)).to_dict()), default=str))


def period_rows(db: Path) -> dict[str, int]:
    with billing_audit.open(db) as s:
        out: dict[str, int] = {}
        for _provider, period, _currency, lines, *_ in s.summary().rows():
            out[period] = out.get(period, 0) + lines
        return out


# -- the key test: pulled == ingested locally -------------------------------------------------------
def test_pull_matches_local_ingest_and_fetches_only_newest(peer: AwsPeer, tmp_path: Path) -> None:
    r = pull(peer, tmp_path, "--bucket", BILLING)
    assert r.exit_code == 0, r.output
    r = pull(peer, tmp_path, "--bucket", FOCUS, "--prefix", "focus-exports")
    assert r.exit_code == 0, r.output
    assert "file(s) ingested" in r.output

    # only the newest delivery of each period went over the wire
    assert peer.gets(LEGACY_NEW) and not peer.gets(LEGACY_OLD)
    assert peer.gets("20261003T041700Z") and not peer.gets(CUR2_OLD)
    assert not (tmp_path / "cache" / BILLING / "cur/gpu-cur-csv/20261001-20261101" / LEGACY_OLD).exists()
    assert not any((tmp_path / "cache").rglob("*.part"))
    # the keys are kept under the cache
    assert (tmp_path / "cache" / BILLING / "exports/gpu-cur2-snap/metadata/BILLING_PERIOD=2026-09/gpu-cur2-snap-Manifest.json").is_file()

    local = local_store(tmp_path, "aws/cur-legacy-csv", "aws/cur2-create-new", "aws/cur2", "aws/cur-legacy-parquet",
                        "focus/aws-focus-1.2")
    with billing_audit.open(tmp_path / "pulled.duckdb") as pulled:
        assert pulled.summary().rows() == local.summary().rows()
        assert totals(pulled) == totals(local)
        assert report_json(pulled) == report_json(local)
    local.close()


def test_second_pull_downloads_nothing(peer: AwsPeer, tmp_path: Path) -> None:
    assert pull(peer, tmp_path, "--bucket", BILLING).exit_code == 0
    state = json.loads((tmp_path / "cache" / BILLING / ".pull-state.json").read_text())
    before = period_rows(tmp_path / "pulled.duckdb")
    peer.state.log.clear()
    r = pull(peer, tmp_path, "--bucket", BILLING)
    assert r.exit_code == 0, r.output
    assert peer.gets() == [], "a second pull with nothing new must not GET any object"
    assert "0 file(s) downloaded" in r.output and "unchanged" in r.output
    assert json.loads((tmp_path / "cache" / BILLING / ".pull-state.json").read_text()) == state
    assert period_rows(tmp_path / "pulled.duckdb") == before


def test_new_assembly_replaces_the_old_one(peer: AwsPeer, tmp_path: Path) -> None:
    """Keep-versions: a refresh adds an assembly; the next pull fetches only it and the period is replaced."""
    peer.reset()
    src = FIXTURES / "aws/cur-legacy-csv/cur/gpu-cur-csv/20261001-20261101"
    first = tmp_path / "first/cur/gpu-cur-csv/20261001-20261101"
    shutil.copytree(src / LEGACY_OLD, first / LEGACY_OLD)
    shutil.copy(src / LEGACY_OLD / "gpu-cur-csv-Manifest.json", first / "gpu-cur-csv-Manifest.json")
    peer.seed(BILLING, tmp_path / "first")
    assert pull(peer, tmp_path, "--bucket", BILLING, "--report", "gpu-cur-csv").exit_code == 0
    old = local_store(tmp_path, "aws/cur-legacy-csv/cur/gpu-cur-csv/20261001-20261101/" + LEGACY_OLD)
    with billing_audit.open(tmp_path / "pulled.duckdb") as s:
        assert s.summary().rows() == old.summary().rows()
    old.close()

    peer.seed(BILLING, FIXTURES / "aws/cur-legacy-csv")  # the refresh: new assembly, period manifest rewritten
    peer.state.log.clear()
    r = pull(peer, tmp_path, "--bucket", BILLING, "--prefix", "cur", "--report", "gpu-cur-csv")
    assert r.exit_code == 0, r.output
    assert peer.gets(LEGACY_NEW) and not peer.gets(LEGACY_OLD)
    (tmp_path / "local.duckdb").unlink()
    new = local_store(tmp_path, "aws/cur-legacy-csv")
    with billing_audit.open(tmp_path / "pulled.duckdb") as s:
        assert s.summary().rows() == new.summary().rows()
    new.close()
    # the superseded assembly left the cache
    period = tmp_path / "cache" / BILLING / "cur/gpu-cur-csv/20261001-20261101"
    assert not (period / LEGACY_OLD).exists() and (period / LEGACY_NEW).is_dir()


def test_period_filter(peer: AwsPeer, tmp_path: Path) -> None:
    r = pull(peer, tmp_path, "--bucket", BILLING, "--prefix", "exports", "--period", "2026-09")
    assert r.exit_code == 0, r.output
    assert list(period_rows(tmp_path / "pulled.duckdb")) == ["2026-09"]
    assert not peer.gets("BILLING_PERIOD=2026-10")


def test_dry_run_lists_and_fetches_nothing(peer: AwsPeer, tmp_path: Path) -> None:
    r = pull(peer, tmp_path, "--bucket", BILLING, "--dry-run")
    assert r.exit_code == 0, r.output
    assert f"2026-10  gpu-cur-csv assembly {LEGACY_NEW}: 4 object(s)" in r.output
    assert "2026-09  gpu-cur2-snap execution" in r.output and "fetch " in r.output
    assert LEGACY_OLD not in r.output and CUR2_OLD not in r.output
    assert not peer.gets(".parquet") and not peer.gets(".csv.gz")
    assert not (tmp_path / "pulled.duckdb").exists()
    assert not [p for p in (tmp_path / "cache").rglob("*") if p.is_file()]


# -- discovery through the APIs ---------------------------------------------------------------------
def _export(name: str, bucket: str, prefix: str, overwrite: str = "CREATE_NEW_REPORT") -> dict[str, Any]:
    return {
        "ExportArn": f"arn:aws:bcm-data-exports:us-east-1:222233334444:export/{name}-0000",
        "Name": name,
        "DataQuery": {"QueryStatement": "SELECT * FROM COST_AND_USAGE_REPORT",
                      "TableConfigurations": {"COST_AND_USAGE_REPORT": {"TIME_GRANULARITY": "DAILY"}}},
        "DestinationConfigurations": {"S3Destination": {
            "S3Bucket": bucket, "S3Prefix": prefix, "S3Region": "us-east-1",
            "S3OutputConfigurations": {"OutputType": "CUSTOM", "Format": "PARQUET", "Compression": "PARQUET",
                                       "Overwrite": overwrite}}},
        "RefreshCadence": {"Frequency": "SYNCHRONOUS"},
    }


def test_export_found_through_bcm_data_exports(peer: AwsPeer, tmp_path: Path) -> None:
    peer.state.exports += [_export("gpu-cur2-snap", BILLING, "exports"), _export("gpu-focus", FOCUS, "focus-exports")]
    r = pull(peer, tmp_path, "--export", "gpu-focus")  # no --bucket: GetExport names it
    assert r.exit_code == 0, r.output
    assert "AWSBillingAndCostManagementDataExports.GetExport" in peer.targets()
    local = local_store(tmp_path, "focus/aws-focus-1.2")
    with billing_audit.open(tmp_path / "pulled.duckdb") as s:
        assert s.summary().rows() == local.summary().rows()
    local.close()


def test_report_found_through_cur_api(peer: AwsPeer, tmp_path: Path) -> None:
    peer.state.reports.append({
        "ReportName": "gpu-cur-csv", "TimeUnit": "HOURLY", "Format": "textORcsv", "Compression": "GZIP",
        "AdditionalSchemaElements": ["RESOURCES"], "S3Bucket": BILLING, "S3Prefix": "cur", "S3Region": "us-east-1",
        "RefreshClosedReports": True, "ReportVersioning": "CREATE_NEW_REPORT",
    })
    r = pull(peer, tmp_path, "--report", "gpu-cur-csv")
    assert r.exit_code == 0, r.output
    assert "AWSOrigamiServiceGatewayService.DescribeReportDefinitions" in peer.targets()
    assert peer.gets(LEGACY_NEW) and not peer.gets(LEGACY_OLD) and not peer.gets("exports/")


def test_discovery_access_denied_falls_back_to_the_bucket_layout(peer: AwsPeer, tmp_path: Path) -> None:
    peer.state.deny_discovery = True
    r = pull(peer, tmp_path, "--bucket", BILLING, "--prefix", "exports", "--export", "gpu-cur2-snap")
    assert r.exit_code == 0, r.output
    assert "error" not in r.output.lower() and "denied" not in r.output.lower()
    assert list(period_rows(tmp_path / "pulled.duckdb")) == ["2026-09"]
    # without a bucket there is nothing to fall back to: a clear message
    r = pull(peer, tmp_path, "--export", "gpu-cur2-snap")
    assert r.exit_code == 2
    assert "give --bucket" in r.output


def test_wrong_kind_of_name_is_explained(peer: AwsPeer, tmp_path: Path) -> None:
    r = pull(peer, tmp_path, "--bucket", BILLING, "--export", "gpu-cur-csv")
    assert r.exit_code == 2 and "use --report" in r.output
    r = pull(peer, tmp_path, "--bucket", BILLING, "--report", "nope")
    assert r.exit_code == 2 and "no report named 'nope'" in r.output


# -- faults ---------------------------------------------------------------------------------------
def test_503_then_success_is_retried(peer: AwsPeer, tmp_path: Path) -> None:
    key = "gpu-cur2-00001.snappy.parquet"
    peer.state.faults.append(Fault(key, status=503, code="SlowDown", times=2))
    peer.state.faults.append(Fault("list-type=2", status=503, code="ServiceUnavailable", times=1))
    r = pull(peer, tmp_path, "--bucket", BILLING, "--prefix", "exports", "--export", "gpu-cur2")
    assert r.exit_code == 0, r.output
    assert [g.status for g in peer.gets(key)] == [503, 503, 200]
    local = local_store(tmp_path, "aws/cur2")
    with billing_audit.open(tmp_path / "pulled.duckdb") as s:
        assert s.summary().rows() == local.summary().rows()
    local.close()


def test_dropped_connection_resumes_with_range(peer: AwsPeer, tmp_path: Path) -> None:
    key = "20261003T041700Z/gpu-cur2-snap-00001.snappy.parquet"
    peer.state.faults.append(Fault(key, drop_after=7000))
    r = pull(peer, tmp_path, "--bucket", BILLING, "--export", "gpu-cur2-snap")
    assert r.exit_code == 0, r.output
    gets = peer.gets(key)
    assert len(gets) == 2
    assert gets[0].range is None and gets[0].sent == 7000
    assert gets[1].range == "bytes=7000-" and gets[1].status == 206
    local = FIXTURES / "aws/cur2-create-new/exports/gpu-cur2-snap/data/BILLING_PERIOD=2026-09" / key
    cached = tmp_path / "cache" / BILLING / "exports/gpu-cur2-snap/data/BILLING_PERIOD=2026-09" / key
    assert cached.read_bytes() == local.read_bytes()


def test_partial_file_from_an_interrupted_pull_is_resumed(peer: AwsPeer, tmp_path: Path) -> None:
    rel = "exports/gpu-cur2/data/BILLING_PERIOD=2026-10/gpu-cur2-00002.snappy.parquet"
    src = (FIXTURES / "aws/cur2" / rel).read_bytes()
    part = tmp_path / "cache" / BILLING / (rel + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(src[:12345])
    etag = peer.s3().head_object(Bucket=BILLING, Key=rel)["ETag"].strip('"')
    part.with_name(part.name + ".etag").write_text(etag)  # what the interrupted pull recorded
    r = pull(peer, tmp_path, "--bucket", BILLING, "--export", "gpu-cur2")
    assert r.exit_code == 0, r.output
    assert [g.range for g in peer.gets("gpu-cur2-00002")] == ["bytes=12345-"]
    assert (tmp_path / "cache" / BILLING / rel).read_bytes() == src
    assert not list((tmp_path / "cache").rglob("*.part*"))


def test_partial_file_of_an_older_version_is_restarted(peer: AwsPeer, tmp_path: Path) -> None:
    rel = "exports/gpu-cur2/data/BILLING_PERIOD=2026-10/gpu-cur2-00002.snappy.parquet"
    src = (FIXTURES / "aws/cur2" / rel).read_bytes()
    part = tmp_path / "cache" / BILLING / (rel + ".part")
    part.parent.mkdir(parents=True)
    part.write_bytes(b"x" * 12345)
    part.with_name(part.name + ".etag").write_text("0123456789abcdef0123456789abcdef")
    r = pull(peer, tmp_path, "--bucket", BILLING, "--export", "gpu-cur2")
    assert r.exit_code == 0, r.output
    assert [g.range for g in peer.gets("gpu-cur2-00002")] == [None]
    assert (tmp_path / "cache" / BILLING / rel).read_bytes() == src


def test_create_new_with_timestamped_manifests_or_none(peer: AwsPeer, tmp_path: Path) -> None:
    """Create-new exports whose manifests sit in timestamped folders, or that have no manifest: the newest execution."""
    peer.reset()
    base = FIXTURES / "aws/cur2-create-new/exports/gpu-cur2-snap"
    manifest = json.loads((base / "metadata/BILLING_PERIOD=2026-09/gpu-cur2-snap-Manifest.json").read_text())
    s3 = peer.s3()
    for bucket in ("stamped-billing", "bare-billing"):
        peer.seed(bucket, base / "data", under="exports/gpu-cur2-snap/data/")
    for stamp in ("20261002T041500Z", "20261003T041700Z"):
        doc = dict(manifest, executionId=f"exec-{stamp}", dataFiles=[
            f"s3://stamped-billing/exports/gpu-cur2-snap/data/BILLING_PERIOD=2026-09/{stamp}/{f.name}"
            for f in sorted((base / "data/BILLING_PERIOD=2026-09" / stamp).iterdir())])
        s3.put_object(Bucket="stamped-billing", Key=f"exports/gpu-cur2-snap/metadata/BILLING_PERIOD=2026-09/{stamp}/gpu-cur2-snap-Manifest.json",
                      Body=json.dumps(doc).encode())
    local = local_store(tmp_path, "aws/cur2-create-new")
    for bucket in ("stamped-billing", "bare-billing"):
        db = tmp_path / f"{bucket}.duckdb"
        r = pull(peer, tmp_path, "--bucket", bucket, "--prefix", "exports", db=db)
        assert r.exit_code == 0, r.output
        with billing_audit.open(db) as s:
            assert s.summary().rows() == local.summary().rows(), bucket
    local.close()
    assert peer.gets("20261003T041700Z") and not peer.gets(CUR2_OLD)


def test_access_denied_on_the_bucket(peer: AwsPeer, tmp_path: Path) -> None:
    peer.state.faults.append(Fault(f"/{BILLING}", status=403, code="AccessDenied", times=-1))
    r = pull(peer, tmp_path, "--bucket", BILLING)
    assert r.exit_code == 2
    assert "access denied to s3://example-billing-bucket" in r.output and "s3:ListBucket" in r.output
    assert "Traceback" not in r.output and len(r.output.strip().splitlines()) == 1


def test_no_such_bucket(peer: AwsPeer, tmp_path: Path) -> None:
    r = pull(peer, tmp_path, "--bucket", "no-such-billing-bucket")
    assert r.exit_code == 2
    assert "bucket 'no-such-billing-bucket' does not exist" in r.output


def _broken_bucket(peer: AwsPeer, tmp_path: Path, bad_key: str) -> None:
    """A bucket with the good CUR 2.0 export and a legacy report whose manifest lists bad_key."""
    peer.seed("broken-billing", FIXTURES / "aws/cur2")
    src = FIXTURES / "aws/cur-legacy-csv/cur/gpu-cur-csv/20261001-20261101"
    manifest = json.loads((src / "gpu-cur-csv-Manifest.json").read_text())
    manifest["reportKeys"].append(bad_key)
    s3 = peer.s3()
    for f in (src / LEGACY_NEW).iterdir():
        s3.put_object(Bucket="broken-billing", Key=f"cur/gpu-cur-csv/20261001-20261101/{LEGACY_NEW}/{f.name}", Body=f.read_bytes())
    s3.put_object(Bucket="broken-billing", Key="cur/gpu-cur-csv/20261001-20261101/gpu-cur-csv-Manifest.json",
                  Body=json.dumps(manifest).encode())


def test_manifest_listing_a_missing_object(peer: AwsPeer, tmp_path: Path) -> None:
    missing = f"cur/gpu-cur-csv/20261001-20261101/{LEGACY_NEW}/gpu-cur-csv-3.csv.gz"
    _broken_bucket(peer, tmp_path, missing)
    r = pull(peer, tmp_path, "--bucket", "broken-billing")
    assert r.exit_code == 2
    assert f"s3://broken-billing/{missing}, which is not in the bucket" in r.output
    assert "nothing is ingested for this period" in r.output
    with billing_audit.open(tmp_path / "pulled.duckdb") as s:
        legacy = s.sql("SELECT count(*) AS n FROM line_items WHERE BillingAccountId = '012345678901'").item()
        assert legacy == 0, "nothing of the broken legacy period may be ingested"
    local = local_store(tmp_path, "aws/cur2")
    with billing_audit.open(tmp_path / "pulled.duckdb") as s:
        assert s.summary().rows() == local.summary().rows()  # the good export still came in
    local.close()
    assert not peer.gets("gpu-cur-csv-1.csv.gz"), "the broken delivery is not downloaded"


def test_manifest_key_climbing_out_is_refused(peer: AwsPeer, tmp_path: Path) -> None:
    _broken_bucket(peer, tmp_path, "cur/../../../../escaped.csv.gz")
    peer.s3().put_object(Bucket="broken-billing", Key="cur/../../../../escaped.csv.gz", Body=b"x")
    r = pull(peer, tmp_path, "--bucket", "broken-billing")
    assert r.exit_code == 2
    assert "climbs out of the cache folder" in r.output
    assert not list(tmp_path.rglob("escaped.csv.gz"))
    with billing_audit.open(tmp_path / "pulled.duckdb") as s:
        assert s.sql("SELECT count(*) FROM line_items WHERE BillingAccountId = '012345678901'").item() == 0


def test_no_credentials(peer: AwsPeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_WEB_IDENTITY_TOKEN_FILE",
                "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI", "AWS_CONTAINER_CREDENTIALS_FULL_URI"):
        monkeypatch.delenv(var, raising=False)
    r = pull(peer, tmp_path, "--bucket", BILLING)
    assert r.exit_code == 2
    assert "no AWS credentials found" in r.output and "--profile" in r.output
    r = pull(peer, tmp_path, "--bucket", BILLING, "--profile", "nope")
    assert r.exit_code == 2 and "AWS profile 'nope'" in r.output


def test_profile_from_the_shared_files(peer: AwsPeer, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN"):
        monkeypatch.delenv(var, raising=False)
    creds = tmp_path / "no-aws-credentials"
    creds.write_text(f"[billing-ro]\naws_access_key_id = AKIAPROFILEKEY000000\naws_secret_access_key = {SECRET}\n")
    r = pull(peer, tmp_path, "--bucket", BILLING, "--prefix", "exports", "--profile", "billing-ro", "--region", "us-east-1")
    assert r.exit_code == 0, r.output


def test_help_documents_auth_and_permissions() -> None:
    r = CliRunner().invoke(main, ["pull", "aws", "--help"])
    assert r.exit_code == 0
    for needle in ("s3:ListBucket", "s3:GetObject", "bcm-data-exports:ListExports", "bcm-data-exports:GetExport",
                   "cur:DescribeReportDefinitions", "--profile", "aws sso login", "instance role", "Example",
                   "--dry-run", "--cache"):
        assert needle in r.output, needle


def test_command_module_does_not_import_boto3() -> None:
    import subprocess
    import sys

    code = ("import sys, billing_audit.cli; "
            "bad = [m for m in sys.modules if m.split('.')[0] in ('boto3', 'botocore')]; print(bad); sys.exit(bool(bad))")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True).returncode == 0
