"""Sizing: the local (DuckDB) audit against the Spark raw-export audit on the same generated export.

For each N (``--rows``) and provider, the estate is generated once (``billing-audit generate``), then each engine's
audit runs as a whole process:

    local   billing-audit audit DIR --db local.duckdb --out local/ -q
    spark   billing-audit audit DIR --db spark.duckdb --out spark/ -q --engine spark --source raw --spark-master M

Each records wall seconds, CPU seconds and the peak memory of the WHOLE PROCESS TREE: the command's process and
every descendant (Spark's JVM is a child of the Python process; ``/usr/bin/time`` sees only the Python process),
their RSS summed from ``/proc`` every 0.2 s.  CPU seconds are the larger of the command's rusage (itself and the
children it waited for) and the sum of each sampled process's own user + system time (the JVM is never waited for
by its parent, so only sampling sees its CPU).  The two reports are compared: report.json's figures (without the
generation time, the engine name and the fee reconciliation, which an engine run does not do) and jobs.csv /
teams.csv byte for byte.  Results merge into ``--out`` (default bench/spark-results.json) by provider and N, with
the core count and the load average before and after each run.

    .venv/bin/python bench/spark_sizing.py --rows 1000000 --provider aws
    .venv/bin/python bench/spark_sizing.py --rows 1000000 3000000 --provider aws --provider azure
"""

from __future__ import annotations

import argparse
import contextlib
import csv
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
CLI = str(Path(sys.executable).parent / "billing-audit")
PAGE = os.sysconf("SC_PAGE_SIZE")
TICKS = os.sysconf("SC_CLK_TCK")
ENGINE_ONLY_WARNING = "fee reconciliation: not done"  # an engine run's report says the fee lines are not in the store


def loadavg() -> float | None:
    try:
        return float(Path("/proc/loadavg").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return None


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(parent pid, RSS bytes, own user+system clock ticks) of a live process, None once it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    rest = text[text.rindex(")") + 2:].split()  # after "pid (comm) ": state is field 3
    ppid, utime, stime, rss_pages = int(rest[1]), int(rest[11]), int(rest[12]), int(rest[21])
    return ppid, rss_pages * PAGE, utime + stime


def tree(root: int) -> dict[int, tuple[int, int]]:
    """The live processes of the tree under `root` (itself included): pid -> (RSS bytes, CPU ticks)."""
    procs: dict[int, tuple[int, int, int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _stat(int(entry))
            if got is not None:
                procs[int(entry)] = got
    children: dict[int, list[int]] = {}
    for pid, (ppid, _, _) in procs.items():
        children.setdefault(ppid, []).append(pid)
    out: dict[int, tuple[int, int]] = {}
    todo = [root] if root in procs else []
    while todo:
        pid = todo.pop()
        out[pid] = procs[pid][1:]
        todo.extend(children.get(pid, []))
    return out


@dataclass
class TreeSampler:
    """Samples a process tree every `interval` seconds on a thread: the peak of its summed RSS, and each process's
    last seen CPU time."""

    root: int
    interval: float = 0.2
    peak_bytes: int = 0
    peak_processes: int = 0
    cpu_ticks: dict[int, int] = field(default_factory=dict)
    samples: int = 0
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def sample(self) -> None:
        now = tree(self.root)
        if not now:
            return
        self.samples += 1
        total = sum(rss for rss, _ in now.values())
        if total > self.peak_bytes:
            self.peak_bytes, self.peak_processes = total, len(now)
        for pid, (_, ticks) in now.items():
            self.cpu_ticks[pid] = max(ticks, self.cpu_ticks.get(pid, 0))

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.sample()
            self._stop.wait(self.interval)

    def __enter__(self) -> TreeSampler:
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join()

    @property
    def peak_mib(self) -> float:
        return round(self.peak_bytes / 2**20, 1)

    @property
    def cpu_s(self) -> float:
        return round(sum(self.cpu_ticks.values()) / TICKS, 2)


def run_tree(cmd: list[str], timeout: float, env: dict[str, str] | None = None, interval: float = 0.2) -> dict[str, Any]:
    """Run `cmd` as a whole process: wall s, CPU s and peak RSS of its whole tree (MiB), exit code, load."""
    environ = {k: v for k, v in os.environ.items() if k != "BILLING_AUDIT_DB"} | (env or {}) | {"NO_COLOR": "1"}
    load_before = loadavg()
    err = tempfile.TemporaryFile()  # noqa: SIM115 - the child writes it, read after the wait below
    started = time.perf_counter()
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=environ, cwd=ROOT, start_new_session=True)
    rc: int | None = None
    with TreeSampler(proc.pid, interval) as sampler:
        deadline = started + timeout
        usage = None
        while rc is None:
            pid, status, usage = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                rc = os.waitstatus_to_exitcode(status)
                break
            if time.perf_counter() > deadline:
                os.killpg(proc.pid, 9)
                _, status, usage = os.wait4(proc.pid, 0)
                rc = -9
                break
            time.sleep(0.05)
    proc.returncode = rc
    wall = time.perf_counter() - started
    _reap_group(proc.pid)
    waited = round(usage.ru_utime + usage.ru_stime, 2) if usage is not None else 0.0
    err.seek(0)
    out: dict[str, Any] = {"wall_s": round(wall, 2), "cpu_s": max(waited, sampler.cpu_s), "cpu_s_waited": waited,
                           "cpu_s_sampled": sampler.cpu_s, "peak_tree_mib": sampler.peak_mib,
                           "peak_processes": sampler.peak_processes, "samples": sampler.samples, "rc": rc,
                           "load_before": load_before, "load_after": loadavg()}
    if rc != 0:
        out["stderr"] = err.read().decode("utf-8", "replace")[-3000:]
    err.close()
    return out


def _reap_group(pgid: int) -> None:
    """A JVM left behind by the command (its own session: never another engineer's process) is stopped."""
    for _ in range(50):
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.1)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pgid, 15)


# What an engine prices from the export's own on-demand prices only, where a local report also prices spot lines
# from the bill's on-demand lines (README "Scaling out"): compared apart from the rest (daily spot_cost is the priced part).
SAVINGS = frozenset({"on_demand_equivalent_cost", "gross_spot_savings", "net_spot_savings", "savings_eroded_pct",
                     "spot_cost_priced", "spot_unpriced_cost", "savings_coverage_pct", "on_demand_cost", "spot_cost",
                     "recommendation", "reasons"})
SAVINGS_WARNING = "savings measured for"


def figures(folder: Path) -> dict[str, Any]:
    """report.json's figures: what does not depend on when or where they were computed."""
    doc = json.loads((folder / "report.json").read_text(encoding="utf-8"))
    body = {k: v for k, v in doc.items() if k not in ("generated_at", "fee_reconciliation")}
    body["filters"] = {k: v for k, v in doc.get("filters", {}).items() if k != "engine"}
    body["warnings"] = [w for w in doc.get("warnings", []) if not w.startswith(ENGINE_ONLY_WARNING)]
    return body


def without_savings(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: without_savings(v) for k, v in value.items() if k not in SAVINGS}
    if isinstance(value, list):
        return [without_savings(v) for v in value if not (isinstance(v, str) and v.startswith(SAVINGS_WARNING))]
    return value


def csv_rows(path: Path, drop: frozenset[str] = frozenset()) -> list[dict[str, str]]:
    with path.open(newline="", encoding="utf-8") as f:
        return [{k: v for k, v in row.items() if k not in drop} for row in csv.DictReader(f)]


def compare(local: Path, spark: Path) -> dict[str, Any]:
    """Whether the two audits wrote the same figures: report.json's and jobs.csv / teams.csv, whole
    (``identical``) and without the savings an engine prices from the export's own on-demand prices only
    (``same_except_savings``, with what differs in the rest named)."""
    try:
        a, b = figures(local), figures(spark)
        csvs = {n: ((local / n).read_bytes() == (spark / n).read_bytes(),
                    csv_rows(local / n, SAVINGS) == csv_rows(spark / n, SAVINGS)) for n in ("jobs.csv", "teams.csv")}
    except (OSError, ValueError) as e:
        return {"identical": False, "same_except_savings": False, "error": str(e)}
    sa, sb = without_savings(a), without_savings(b)
    differ = sorted(k for k in sa.keys() | sb.keys() if sa.get(k) != sb.get(k))
    savings_differ = sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))
    totals = {}
    for ta, tb in zip(a.get("totals", []), b.get("totals", []), strict=False):
        totals[ta.get("currency")] = {k: [ta.get(k), tb.get(k)] for k in sorted(SAVINGS) if k in ta and ta.get(k) != tb.get(k)}
    return {"identical": not savings_differ and all(whole for whole, _ in csvs.values()),
            "same_except_savings": not differ and all(rest for _, rest in csvs.values()),
            "report_keys_differing": savings_differ, "report_keys_differing_except_savings": differ,
            "csv_identical": {n: whole for n, (whole, _) in csvs.items()},
            "csv_same_except_savings": {n: rest for n, (_, rest) in csvs.items()},
            "savings_local_vs_spark": totals, "jobs": len(a.get("jobs") or [])}


def generate(workdir: Path, provider: str, rows: int, seed: int, timeout: float) -> tuple[Path, dict[str, Any]]:
    folder = workdir / f"{provider}-{rows}-s{seed}"
    done = folder / ".generated.json"
    if done.exists():
        return folder / "export", json.loads(done.read_text())
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    res = run_tree([CLI, "generate", "--provider", provider, "--rows", str(rows), "--out", str(folder / "export"),
                    "--seed", str(seed), "-q"], timeout)
    if res["rc"] != 0:
        raise SystemExit(f"generate {provider} {rows}: {res.get('stderr')}")
    files = [f for f in (folder / "export").rglob("*") if f.is_file()]
    info = {"files": len(files), "bytes": sum(f.stat().st_size for f in files), "generate": res}
    done.write_text(json.dumps(info, indent=2))
    return folder / "export", info


def size_one(provider: str, rows: int, args: argparse.Namespace) -> dict[str, Any]:
    data, info = generate(args.workdir, provider, rows, args.seed, args.timeout)
    scratch = args.workdir / f"run-{provider}-{rows}"
    runs: dict[str, list[dict[str, Any]]] = {"local": [], "spark": []}
    for i in range(args.repeat):
        for engine in args.engines:
            work = scratch / engine
            shutil.rmtree(work, ignore_errors=True)
            work.mkdir(parents=True)
            cmd = [CLI, "audit", str(data), "--db", str(work / "store.duckdb"), "--out", str(work / "out"), "-q"]
            if engine == "spark":
                cmd += ["--engine", "spark", "--source", "raw", "--spark-master", args.spark_master]
            print(f"[{provider} {rows:,}] {engine} run {i + 1}/{args.repeat} (load {loadavg()})", file=sys.stderr,
                  flush=True)
            r = run_tree(cmd, args.timeout)
            print(f"  {r['wall_s']} s wall, {r['cpu_s']} CPU s, {r['peak_tree_mib']} MiB tree, rc {r['rc']}",
                  file=sys.stderr, flush=True)
            runs[engine].append(r)
        if {"local", "spark"} <= set(args.engines):
            runs["spark"][-1]["compared"] = compare(scratch / "local" / "out", scratch / "spark" / "out")
    result: dict[str, Any] = {"provider": provider, "rows": rows, "seed": args.seed, "export": info,
                              "spark_master": args.spark_master,
                              "driver_memory": os.environ.get("BILLING_AUDIT_SPARK_DRIVER_MEMORY", "2g")}
    for engine, rs in runs.items():
        if rs:
            result[engine] = summary(rs)
    if result.get("local", {}).get("median_wall_s") and result.get("spark", {}).get("median_wall_s"):
        lo, sp = result["local"], result["spark"]
        result["spark_over_local"] = {k: round(sp[k] / lo[k], 1) for k in ("median_wall_s", "median_cpu_s", "peak_tree_mib")
                                      if sp.get(k) and lo.get(k)}
    compared = [r.get("compared") for r in runs["spark"] if r.get("compared")]
    if compared:
        result["same_report"] = all(c["same_except_savings"] for c in compared)
        result["identical_report"] = all(c["identical"] for c in compared)
        result["comparison"] = compared[-1]
    return result


def summary(rs: list[dict[str, Any]]) -> dict[str, Any]:
    ok = [r for r in rs if r["rc"] == 0]
    return {
        "median_wall_s": round(statistics.median(r["wall_s"] for r in ok), 1) if ok else None,
        "median_cpu_s": round(statistics.median(r["cpu_s"] for r in ok), 1) if ok else None,
        "peak_tree_mib": max((r["peak_tree_mib"] for r in ok), default=None),
        "failures": len(rs) - len(ok),
        "runs": rs,
    }


def machine() -> dict[str, Any]:
    return {"cores": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
            "memory_mib": round(os.sysconf("SC_PHYS_PAGES") * PAGE / 2**20)}


def merge(out: Path, results: list[dict[str, Any]]) -> dict[str, Any]:
    """Add the results to the file's, replacing those of the same provider and N."""
    doc: dict[str, Any] = {"runs": []}
    if out.exists():
        doc = json.loads(out.read_text(encoding="utf-8"))
    keys = {(r["provider"], r["rows"]) for r in results}
    doc["runs"] = [r for r in doc.get("runs", []) if (r["provider"], r["rows"]) not in keys] + results
    doc["runs"].sort(key=lambda r: (r["provider"], r["rows"]))
    doc["machine"] = machine()
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=2, default=str) + "\n", encoding="utf-8")
    return doc


def table(doc: dict[str, Any]) -> str:
    lines = ["provider     lines   engine  wall s   CPU s  peak tree MiB  load   same report"]
    for r in doc["runs"]:
        for engine in ("local", "spark"):
            e = r.get(engine)
            if not e:
                continue
            loads = [x["load_before"] for x in e["runs"] if x.get("load_before") is not None]
            lines.append(f"{r['provider']:<8} {r['rows']:>9,}   {engine:<6} {e['median_wall_s']!s:>7} {e['median_cpu_s']!s:>7} "
                         f"{e['peak_tree_mib']!s:>14}  {max(loads, default=0):>4}   "
                         f"{r.get('same_report', '-') if engine == 'spark' else ''}")
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description="Local DuckDB audit vs Spark raw-export audit: wall, CPU, peak memory "
                                             "of the process tree, same report.")
    ap.add_argument("--rows", type=int, nargs="+", default=[1_000_000], help="line counts to size (default 1,000,000)")
    ap.add_argument("--provider", choices=["aws", "azure", "gcp"], action="append",
                    help="the estate to generate (repeat for several; default aws)")
    ap.add_argument("--engines", nargs="+", choices=["local", "spark"], default=["local", "spark"])
    ap.add_argument("--repeat", type=int, default=1, help="runs per engine (medians reported)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--spark-master", default="local[2]")
    ap.add_argument("--timeout", type=float, default=4 * 3600, help="seconds per run before it is killed")
    ap.add_argument("--workdir", type=Path, default=Path(tempfile.gettempdir()) / "billing-audit-spark-sizing")
    ap.add_argument("--out", type=Path, default=ROOT / "bench" / "spark-results.json")
    args = ap.parse_args(argv)
    if any(n < 1 for n in args.rows):
        ap.error("--rows: each N must be 1 or more")
    if args.repeat < 1:
        ap.error("--repeat must be 1 or more")
    args.provider = args.provider or ["aws"]
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    results = [size_one(p, n, args) for p in args.provider for n in args.rows]
    doc = merge(args.out, results)
    print(f"{os.cpu_count()} cores; load average now {loadavg()}")
    print(table(doc))
    return 0 if all(r.get("same_report", True) for r in results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
