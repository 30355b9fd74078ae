"""Spark ``--source raw`` over lake URIs (``connectors.spark.lake``): the files listed and read through Spark's
Hadoop file systems, the executors reading each file from its URI.  A real non-local scheme runs here:
``viewfs://`` (Hadoop's own mount-table file system, in hadoop-client) mounted over the fixtures; ``s3a://``,
``abfss://`` and ``gs://`` need connector jars this machine cannot fetch, so their runs are not tested here, only the
error that names the missing connector."""

from __future__ import annotations

import json
import tempfile
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from test_engine_spark_raw import CFG_PATH, MASTER, _figures

from billing_audit.cli import main
from connectors.spark import lake, raw
from connectors.spark.engine import session, split_sources
from support import FIXTURES

MOUNT = "viewfs://lake/exports"


@pytest.fixture(scope="module")
def spark() -> Any:
    s = session(MASTER)
    s.sparkContext.setLogLevel("ERROR")
    s._jsc.hadoopConfiguration().set("fs.viewfs.mounttable.lake.link./exports", FIXTURES.resolve().as_uri())  # noqa: SLF001
    return s


def _uri(folder: str) -> str:
    return f"{MOUNT}/{folder}"


def _audit(args: list[str], db: Path, out: Path, spark: bool) -> Any:
    engine = ["--engine", "spark", "--source", "raw", "--spark-master", MASTER] if spark else []
    res = CliRunner().invoke(main, ["audit", *args, "--db", str(db), "--out", str(out), "--config", str(CFG_PATH),
                                    "-q", *engine])
    assert res.exit_code == 0, res.output
    return res


# one period each (a run over several periods checks budgets on their sum: test_engine_spark_raw): CUR 2.0 parquet,
# a legacy CUR CSV.gz of two assemblies with a zip member (unpacked on the driver: read from there with a local
# master), a CSV with mixed line endings (the normalised copy); the scenarios beside their interruption event files
# (read on the driver into the store)
SETS = ["aws/cur2+aws/cur-legacy-csv+csv-quirks/mixed-line-endings", "scenarios+events/scenarios"]


@pytest.mark.parametrize("folders", SETS)
def test_a_lake_uri_gives_the_local_audit(tmp_path: Path, spark: Any, folders: str) -> None:
    names = folders.split("+")
    _audit([str(FIXTURES / f) for f in names], tmp_path / "a.duckdb", tmp_path / "local", spark=False)
    _audit([_uri(f) for f in names], tmp_path / "b.duckdb", tmp_path / "lake", spark=True)
    for name in ("jobs.csv", "teams.csv"):
        assert (tmp_path / "lake" / name).read_bytes() == (tmp_path / "local" / name).read_bytes(), name
    docs = [_figures(json.loads((tmp_path / d / "report.json").read_text(encoding="utf-8"))) for d in ("local", "lake")]
    assert docs[1] == docs[0]
    assert docs[0]["jobs"] and docs[0]["totals"]
    if "events" in folders:
        assert "events" in {j["interruptions_source"] for j in docs[0]["jobs"]}
    assert not list(Path(tempfile.gettempdir()).glob("ba-lake-*"))  # the staged copies are gone


def test_the_dry_run_names_the_lake_files_and_file_uris_are_their_paths(tmp_path: Path, spark: Any,
                                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    folders = ["aws/cur2-create-new", "aws/cur-legacy-csv"]

    def dry(paths: list[str]) -> str:
        res = CliRunner().invoke(main, ["audit", *paths, "--engine", "spark", "--source", "raw", "--spark-master",
                                        MASTER, "--dry-run"])
        assert res.exit_code == 0, res.output
        return str(res.stdout)

    local = dry([str(FIXTURES / f) for f in folders])
    assert dry([(FIXTURES / f).resolve().as_uri() for f in folders]) == local  # file:// is the folder itself
    mounted = dry([_uri(f) for f in folders])
    assert mounted == local.replace(str(FIXTURES.resolve()), MOUNT)
    assert "kept: aws 222233334444 2026-09 (14 lines)" in mounted
    assert f"{MOUNT}/aws/cur-legacy-csv/cur/gpu-cur-csv/20261001-20261101/b2e1d6c3-0000-4000-8000-000000000002/" \
           "gpu-cur-csv-2.zip!gpu-cur-csv-2.csv  aws-cur  3.3 KB" in mounted
    assert mounted.rstrip().endswith("4 of 4 deliveries readable, 65.2 KB to read")
    csv = str(FIXTURES / "aws/cur-legacy-csv")  # a local folder beside a lake URI: each read where it is
    assert dry([str(FIXTURES / folders[0]), _uri(folders[1])]) == local.replace(csv, _uri(folders[1]))
    assert not (tmp_path / "billing-audit.duckdb").exists()


def test_executors_read_the_lake_and_the_drivers_copies_go_once_planned(spark: Any) -> None:
    snap, csv = _uri("aws/cur2-create-new"), _uri("aws/cur-legacy-csv")
    with ExitStack() as stack:
        staged = lake.stage(spark, [snap, csv], stack)
        copies = [Path(p) for p in staged.reads]
        assert copies and all(p.exists() for p in copies)
        assert all(u.startswith(MOUNT + "/") for u in staged.reads.values())
        with raw.plan(staged.roots, staged=staged, driver_local=False) as p:
            delivered = {f for d in p.deliveries for f in d.delivery.files}
            assert delivered and delivered <= set(copies)
            assert not any(f.exists() for f in delivered)  # each deleted once its delivery was planned (manifests stay)
            parquet = [f for d in p.readable for f in d.files]
            assert parquet and all(f.uri is not None and f.location == f.uri and f.uri.startswith(f"{snap}/")
                                   for f in parquet)
            assert [f.display for f in parquet] == [f.uri for f in parquet]
            # a zip member is unpacked on the driver: a cluster's executors cannot read it, so it is refused
            refused = [d for d in p.deliveries if d.error is not None]
            assert len(refused) == 2 and all(d.error is not None and d.error.reason == raw.UNPACKED for d in refused)
            assert {str(d.error.file) for d in refused if d.error is not None} == {
                f"{csv}/cur/gpu-cur-csv/20261001-20261101/{a}/gpu-cur-csv-2.zip!gpu-cur-csv-2.csv"
                for a in ("a1f0c5d2-0000-4000-8000-000000000001", "b2e1d6c3-0000-4000-8000-000000000002")}
            assert sum(d.size for d in p.deliveries) == sum(staged.sizes[str(f)] for f in delivered) > 0


@pytest.mark.parametrize(("uri", "needs"), [
    ("s3a://billing/cur/gpu-estate/", "hadoop-aws with the AWS SDK bundle"),
    ("abfss://exports@acct.dfs.core.windows.net/costs/", "hadoop-azure"),
    ("gs://billing-export/gcp/", "gcs-connector"),
])
def test_a_scheme_without_its_connector_is_named_before_any_work(tmp_path: Path, spark: Any, uri: str,
                                                                 needs: str) -> None:
    res = CliRunner().invoke(main, ["audit", uri, "--db", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "o"),
                                    "--engine", "spark", "--source", "raw", "--spark-master", MASTER])
    assert res.exit_code == 2, res.output
    assert f"error: {uri}: Spark has no file system for {uri.split(':')[0]}:// here: it needs " in res.output
    assert needs in res.output and "nothing was audited" in res.output and "Traceback" not in res.output
    assert not (tmp_path / "o").exists()


def test_a_missing_lake_path_and_a_uri_for_local_ingest_are_refused(tmp_path: Path, spark: Any) -> None:
    gone = f"{MOUNT}/no-such-folder"
    res = CliRunner().invoke(main, ["audit", gone, "--engine", "spark", "--source", "raw", "--spark-master", MASTER,
                                    "--dry-run"])
    assert res.exit_code == 2 and f"error: --spark-raw: no such file or folder: {gone} (nothing was audited)" in res.output
    res = CliRunner().invoke(main, ["audit", "s3a://billing/cur/", "--db", str(tmp_path / "l.duckdb")])
    assert res.exit_code == 2 and "error: s3a://billing/cur/: a lake URI: only --engine spark --source raw reads" \
                                  in res.output
    assert not (tmp_path / "l.duckdb").exists()


def test_paths_and_uris_joined_by_the_path_separator_split_back() -> None:
    import os

    sep = os.pathsep
    assert split_sources(sep.join(["exports/a", "s3a://b/k", "abfss://c@a.dfs.core.windows.net/x", "/data/b"])) == [
        "exports/a", "s3a://b/k", "abfss://c@a.dfs.core.windows.net/x", "/data/b"]
    assert split_sources("") == [] and split_sources(f"a{sep}{sep}b") == ["a", "b"]
