"""Kubernetes node sharing inside the engines' audit query (billing_audit.engines.k8s_share): DuckDB's
engine and Spark's share a spot node's lines out to its pods' jobs as the local report does, to the
last 1e-12 digit.

The exports are fixtures/gen_k8s.py's (see tests/core/test_kubernetes.py for their figures): EKS node A shared by
llm-a and rl-b (its 1.00 restart fee at 11:00: 1/3 and 2/3, the 1e-12 remainder to rl-b), node B whose one pod
(llm-a, 6.00) covers less than its 8.00 (the unallocated 2.00 stays with the node), GKE's node split by cost
allocation rows.  Beside them, written here into the store: three pods of equal weight on node B (a tie for the
remainder), a daily restart fee on node A (shared over its hours), an EventBridge interruption of node A in an hour
two pods shared it (fixtures/events/eks)."""

from __future__ import annotations

import os
from decimal import Decimal
from pathlib import Path
from typing import Any

import billing_audit
from billing_audit.config import Config
from billing_audit.engines import run_engine
from billing_audit.report import build_report
from billing_audit.rules import load_rules
from support import FIXTURES, report_body, writable_lines

os.environ.setdefault("BILLING_AUDIT_SPARK_PARTITIONS", "2")
MASTER = "local[2]"
D = Decimal
EKS, GKE = FIXTURES / "aws" / "cur2-eks", FIXTURES / "gcp" / "gke-resource-parquet"
EVENTS_EKS = FIXTURES / "events" / "eks"
NODE_A, NODE_B = "i-0e1a2b3c4d5e60001", "i-0e1a2b3c4d5e60002"
RULES = load_rules().rules
UNSHARED = "engine does not share a node's lines out"
RECONCILE = "fee reconciliation: not done"  # a raw engine run's store holds no fee lines to reconcile


def _figures(doc: dict[str, Any]) -> dict[str, Any]:
    body = report_body(doc)
    body.pop("fee_reconciliation", None)
    body["warnings"] = [w for w in body["warnings"] if not w.startswith(RECONCILE)]
    return body


def _jobs(doc: dict[str, Any], provider: str = "aws") -> dict[str, dict[str, Any]]:
    return {j["job"]: j for j in doc["jobs"] if j["provider"] == provider}


def _rows(rep: Any) -> dict[str, dict[str, Any]]:
    """The report's AWS job rows at full precision (its JSON shows money to the cent)."""
    return {r["job"]: r for r in rep.jobs.iter_rows(named=True) if r["provider"] == "aws"}


def _tie_pods(store: billing_audit.Store) -> None:
    """Two more jobs' pods on node B at 10:00, each weighing 6.00 as llm-a's does: node B's 8.00 is 8/3 each,
    2.666666666666 and the 2e-12 remainder to the first of the tied parts by resource (llm-a's pod)."""
    for job in ("tie-d", "tie-c"):
        store.con.execute(f"""INSERT INTO {writable_lines(store.con)} BY NAME SELECT * REPLACE (
              x_LineItemId || '-{job}' AS x_LineItemId, replace(ResourceId, 'llm-a-worker-1', '{job}-0') AS ResourceId,
              MAP {{'aws_eks_cluster_name': 'train-eks', 'aws_eks_namespace': 'research', 'aws_eks_node': '{NODE_B}',
                   'aws_eks_workload_name': '{job}', 'training_kubeflow_org_job_name': '{job}'}} AS Tags)
            FROM line_items WHERE x_SplitParentId = ? AND ResourceId LIKE '%/llm-a-worker-1/%'""", [NODE_B])


def _daily_fee(store: billing_audit.Store) -> None:
    """Node A's restart fee again, 1.70, charged for the whole day 2026-07-10."""
    store.con.execute(f"""INSERT INTO {writable_lines(store.con)} BY NAME SELECT * REPLACE (
          x_LineItemId || '-day' AS x_LineItemId, TIMESTAMP '2026-07-10 00:00:00' AS ChargePeriodStart,
          TIMESTAMP '2026-07-11 00:00:00' AS ChargePeriodEnd, 1.70 AS EffectiveCost, 1.70 AS BilledCost,
          1.70 AS ListCost)
        FROM line_items WHERE ResourceId = ? AND EffectiveCost = 1""", [NODE_A])


def _both(path: Path, inputs: list[Path], change: Any, engine: str,
          basis: str = "effective") -> tuple[dict[str, Any], dict[str, Any], dict[str, dict[str, Any]]]:
    """The local report and `engine`'s of the same store (its lines changed by `change`), July 2026, and the
    engine's AWS job rows."""
    cfg = Config()
    with billing_audit.open(path) as store:
        assert not store.ingest(inputs).errors
        change(store)
        store.tag()
        local = build_report(store, cfg, "2026-07", basis).to_dict()
        kw = {"spark_master": MASTER} if engine == "spark" else {}
        run = run_engine(store, engine, RULES, cfg, "2026-07", basis, **kw)
        savings = None if basis == "effective" else run_engine(store, engine, RULES, cfg, "2026-07", "effective", **kw)
        rep = build_report(store, cfg, "2026-07", basis, engine_run=run, savings_run=savings)
    return _figures(local), _figures(rep.to_dict()), _rows(rep)


def _tied_and_interrupted(engine: str, tmp_path: Path) -> None:
    local, remote, jobs = _both(tmp_path / f"tie-{engine}.duckdb", [EKS, GKE, EVENTS_EKS], _tie_pods, engine)
    assert remote == local
    third = D("2.666666666666")
    assert (D(jobs["tie-c"]["spot_compute_cost"]), D(jobs["tie-d"]["spot_compute_cost"])) == (third, third)
    assert D(jobs["llm-a"]["spot_compute_cost"]) == 5 + 3 + third + D("0.000000000002")  # the tie's remainder
    assert "(unattributed)" not in jobs or D(jobs["(unattributed)"]["spot_compute_cost"]) == 0  # pods cover node B
    # node A's interruption at 11:40, when llm-a (3.00) and rl-b (6.00) shared it: one event, by their shares
    assert (jobs["llm-a"]["interruptions"], jobs["llm-a"]["interruptions_source"]) == (D("0.333333333333"), "events")
    assert (jobs["rl-b"]["interruptions"], jobs["rl-b"]["interruptions_source"]) == (D("0.666666666667"), "events")
    assert not [w for w in remote["warnings"] if UNSHARED in w]


def _daily(engine: str, tmp_path: Path, basis: str = "effective") -> None:
    local, remote, jobs = _both(tmp_path / f"day-{engine}-{basis}.duckdb", [EKS], _daily_fee, engine, basis)
    assert remote == local
    # 1.70 by node A's pods over the day: llm-a 8 and rl-b 9 of 17, beside the hourly fee's
    assert (D(jobs["llm-a"]["restart_fees"]), D(jobs["rl-b"]["restart_fees"])) == (D("1.133333333333"),
                                                                                 D("1.566666666667"))
    assert (jobs["llm-a"]["interruptions"], jobs["rl-b"]["interruptions"]) == (D("0.803921568626"), D("1.196078431374"))


def test_duckdb_engine_shares_as_locally(tmp_path: Path) -> None:
    _tied_and_interrupted("duckdb", tmp_path)
    _daily("duckdb", tmp_path)
    _daily("duckdb", tmp_path, "billed")  # the weights stay effective cost whatever the basis


def test_bigquery_and_athena_queries_do_not_share() -> None:
    """They run the query without the sharing (the warning of their runs: test_engine_warehouse_sql.py)."""
    from billing_audit.engines import pipeline

    sql = pipeline.engine_sql("duckdb", RULES, Config(), "2026-07", "effective")
    assert "ba_split_groups" in sql and "ba_k8s_events" in sql
    for engine in ("bigquery", "athena"):
        assert "ba_split_groups" not in pipeline.engine_sql(engine, RULES, Config(), "2026-07", "effective")


def test_spark_engine_shares_as_locally(tmp_path: Path) -> None:
    _tied_and_interrupted("spark", tmp_path)
    _daily("spark", tmp_path)
