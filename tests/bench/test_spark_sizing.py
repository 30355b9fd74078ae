"""bench/spark_sizing.py: the process-tree sampler sees what /usr/bin/time does not (a child's memory and CPU),
its arguments, and a tiny sizing run end to end (pyspark local[2]) writing the figures and the comparison."""

from __future__ import annotations

import importlib.util
import json
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCH = Path(__file__).resolve().parents[2] / "bench" / "spark_sizing.py"


def _load() -> ModuleType:
    spec = importlib.util.spec_from_file_location("spark_sizing", BENCH)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    sys.modules["spark_sizing"] = module  # dataclasses resolve their module's annotations through sys.modules
    spec.loader.exec_module(module)
    return module


sizing = _load()

# a parent of ~10 MiB that starts a child holding 300 MiB and burning CPU, and never waits for it (as pyspark never
# waits for its JVM): the child's memory and CPU are the tree's, not the parent's
PARENT = """
import os, subprocess, sys, time
child = subprocess.Popen([sys.executable, "-c", '''
import time
block = bytearray(300 * 2**20)
for i in range(0, len(block), 4096):
    block[i] = 1
end = time.process_time() + 1.0
while time.process_time() < end:
    pass
time.sleep(1.0)
'''])
time.sleep(4.0)
os._exit(0)  # not Popen.__del__ at shutdown, which would reap the finished child and so take its rusage
"""


def test_the_tree_sampler_sees_a_childs_memory_and_cpu() -> None:
    r = sizing.run_tree([sys.executable, "-c", PARENT], timeout=60)
    assert r["rc"] == 0
    assert r["peak_processes"] == 2
    assert 300 < r["peak_tree_mib"] < 600, r  # the child's 300 MiB plus two interpreters
    assert r["cpu_s_sampled"] >= 0.9, r  # the child's second of CPU, seen by sampling it
    assert r["cpu_s_waited"] < 0.9, r  # the parent never waited for it: its rusage does not hold it
    assert r["cpu_s"] == max(r["cpu_s_waited"], r["cpu_s_sampled"])
    assert r["wall_s"] >= 4.0 and r["samples"] >= 10


def test_a_failing_command_keeps_its_error() -> None:
    r = sizing.run_tree([sys.executable, "-c", "import sys; sys.exit('no such estate')"], timeout=60)
    assert r["rc"] == 1 and "no such estate" in r["stderr"]


def test_arguments() -> None:
    a = sizing.parse_args([])
    assert (a.rows, a.provider, a.engines, a.repeat, a.spark_master) == ([1_000_000], ["aws"], ["local", "spark"], 1,
                                                                         "local[2]")
    assert a.out == BENCH.parent / "spark-results.json"
    b = sizing.parse_args(["--rows", "1000000", "3000000", "--provider", "aws", "--provider", "azure", "--repeat",
                           "3", "--engines", "spark", "--out", "x.json"])
    assert (b.rows, b.provider, b.engines, b.repeat, b.out) == ([1_000_000, 3_000_000], ["aws", "azure"], ["spark"],
                                                                 3, Path("x.json"))


@pytest.mark.parametrize("argv", [["--rows", "0"], ["--rows", "ten"], ["--provider", "oracle"], ["--repeat", "0"]])
def test_bad_arguments_are_refused(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        sizing.parse_args(argv)
    assert e.value.code == 2
    assert "error:" in capsys.readouterr().err


@pytest.mark.slow
def test_a_tiny_sizing_run_writes_the_figures_and_the_reports_agree(tmp_path: Path) -> None:
    out = tmp_path / "results.json"
    rc = sizing.main(["--rows", "2000", "--workdir", str(tmp_path / "work"), "--out", str(out)])
    assert rc == 0
    doc = json.loads(out.read_text(encoding="utf-8"))
    assert doc["machine"]["cores"] >= 1 and doc["machine"]["memory_mib"] > 0
    [run] = doc["runs"]
    assert (run["provider"], run["rows"], run["spark_master"]) == ("aws", 2000, "local[2]")
    assert run["export"]["files"] >= 1 and run["export"]["bytes"] > 0
    for engine in ("local", "spark"):
        e = run[engine]
        assert e["failures"] == 0 and len(e["runs"]) == 1
        assert e["median_wall_s"] > 0 and e["median_cpu_s"] > 0 and e["peak_tree_mib"] > 50
        assert isinstance(e["runs"][0]["load_before"], float)
    assert run["spark"]["runs"][0]["peak_processes"] >= 2  # the JVM was seen
    assert run["spark"]["peak_tree_mib"] > run["local"]["peak_tree_mib"]
    assert run["spark_over_local"]["median_wall_s"] == pytest.approx(
        run["spark"]["median_wall_s"] / run["local"]["median_wall_s"], abs=0.06)
    c = run["comparison"]
    assert run["same_report"] is True and c["same_except_savings"] is True and c["jobs"] > 0
    assert c["csv_same_except_savings"] == {"jobs.csv": True, "teams.csv": True}
    # the comparison can fail: one job's total moved in the Spark report is named
    spark_out = tmp_path / "work" / "run-aws-2000" / "spark" / "out"
    moved = tmp_path / "moved"
    shutil.copytree(spark_out, moved)
    doc = json.loads((moved / "report.json").read_text(encoding="utf-8"))
    doc["jobs"][0]["total_cost"] = "0.01"
    (moved / "report.json").write_text(json.dumps(doc), encoding="utf-8")
    bad = sizing.compare(spark_out.parent.parent / "local" / "out", moved)
    assert bad["same_except_savings"] is False and bad["report_keys_differing_except_savings"] == ["jobs"]
    # and a second run of another N merges beside the first
    sizing.merge(out, [{**run, "rows": 1000}])
    assert [r["rows"] for r in json.loads(out.read_text(encoding="utf-8"))["runs"]] == [1000, 2000]
