"""Kubernetes attribution: pods of several jobs on shared spot nodes (billing_audit.kubernetes).

The exports (fixtures/gen_k8s.py), July 2026:

EKS (CUR 2.0 with split cost allocation data, USD), pods' weight = split cost + unused cost:
- node A 10:00, 8.00 (on-demand 32.00): llm-a 5.00, rl-b 3.00 -> llm-a 5.00, rl-b 3.00 (od 20.00 / 12.00)
- node A 11:00, 9.00 (od 36.00): llm-a 3.00, rl-b 6.00 -> llm-a 3.00, rl-b 6.00; restart fee 1.00 on node A:
  llm-a 1/3 = 0.333333333333, rl-b 2/3 = 0.666666666667 (the remainder 1e-12 to the larger part)
- node B 10:00, 8.00 (od 32.00): llm-a 6.00, nothing else -> llm-a 6.00, the node's own (unattributed) 2.00
- node C 10:00, 5.00, tagged vision-c, no pods -> vision-c 5.00 (today's attribution)
- llm-a's checkpoint GETs 0.30 at 12:00: in the restart window of llm-a's share of node A's interruption
So llm-a: spot 5 + 3 + 6 = 14.00, fee 0.333333333333, re-read 0.30 linked, spot hours 5/8 + 6/8 + 1/3 =
1.708333333333, interruptions 1/3; rl-b: spot 9.00, fee 0.666666666667, hours 3/8 + 2/3, interruptions 2/3.
Totals (USD): spot 8 + 9 + 8 + 5 = 30.00, fee 1.00, all 31.30, interruptions 1 (the node's one).

GKE (detailed export, cost allocation, EUR): node rows 10:00 detr-x 12.00, sam-y 4.00, kube:unallocated 4.00;
11:00 detr-x 6.00, sam-y 6.00; preemption overhead 0.90 at 11:00 with no pod labels -> 0.45 each.
"""

from __future__ import annotations

import csv
from decimal import Decimal
from pathlib import Path

import pytest

import billing_audit
from billing_audit import app
from billing_audit.config import Attribution, Config
from billing_audit.report import build_report
from support import FIXTURES, writable_lines

D = Decimal
EKS = FIXTURES / "aws" / "cur2-eks"
GKE = FIXTURES / "gcp" / "gke-resource-parquet"
NODE_A = "i-0e1a2b3c4d5e60001"


@pytest.fixture(scope="module")
def store_path(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("k8s") / "k.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([EKS, GKE]).errors
        store.tag()
    return path


def _report(store_path: Path, cfg: Config | None = None):  # type: ignore[no-untyped-def]
    with billing_audit.open(store_path, read_only=True) as store:
        return build_report(store, cfg or Config(), "2026-07")


def _jobs(store_path: Path, cfg: Config | None = None) -> dict[tuple[str, str], dict]:
    return {(r["job"], r["provider"]): r for r in _report(store_path, cfg).jobs.iter_rows(named=True)}


def test_eks_job_gets_its_pods_share_of_the_shared_spot_nodes(store_path: Path) -> None:
    a = _jobs(store_path)[("llm-a", "aws")]
    assert a["team"] == "research"  # no team label: the pod's namespace
    assert a["spot_compute_cost"] == D("14.000000000000")
    assert a["restart_fees"] == D("0.333333333333")
    assert a["storage_reread_cost"] == D("0.300000000000")  # linked to its share of node A's interruption
    assert a["interruptions"] == D("0.333333333333") and a["interruptions_source"] == "fee_lines"
    assert D(str(a["spot_hours"])) == D("1.708333")  # 0.625 + 0.75 + 0.333333333333, shown to 6 places
    assert a["on_demand_equivalent_cost"] == D("56.000000000000")  # 20 + 12 + 24
    b = _jobs(store_path)[("rl-b", "aws")]
    assert b["team"] == "rl"  # the pod's team label wins over its namespace (games)
    assert (b["spot_compute_cost"], b["restart_fees"]) == (D("9.000000000000"), D("0.666666666667"))
    assert b["interruptions"] == D("0.666666666667")
    assert b["on_demand_equivalent_cost"] == D("36.000000000000")  # 12 + 24


def test_eks_node_share_no_pod_covers_stays_with_the_node(store_path: Path) -> None:
    u = _jobs(store_path)[("(unattributed)", "aws")]
    assert u["spot_compute_cost"] == D("2.000000000000") and u["total_cost"] == D("2.000000000000")


def test_node_without_pods_keeps_todays_attribution(store_path: Path) -> None:
    c = _jobs(store_path)[("vision-c", "aws")]
    assert (c["team"], c["spot_compute_cost"], D(str(c["spot_hours"]))) == ("vision", D("5.000000000000"), D(1))


def test_totals_are_the_node_lines_to_the_last_digit(store_path: Path) -> None:
    """The pods' records add no money: totals per currency are the store's lines, and fees count once."""
    rep = _report(store_path)
    tot = {r["currency"]: r for r in rep.totals.iter_rows(named=True)}
    assert tot["USD"]["total_cost"] == D("31.300000000000")  # 8 + 9 + 1 + 8 + 5 + 0.30
    assert tot["USD"]["spot_compute_cost"] == D("30.000000000000")
    assert (tot["USD"]["restart_fees"], tot["USD"]["interruptions"]) == (D("1.000000000000"), D("1.000000000000"))
    assert tot["EUR"]["total_cost"] == D("32.900000000000")  # 12 + 4 + 4 + 6 + 6 + 0.90
    with billing_audit.open(store_path, read_only=True) as store:
        per = dict(store.con.execute("SELECT BillingCurrency, sum(EffectiveCost) FROM line_items GROUP BY 1").fetchall())
    assert per == {"USD": D("31.300000000000"), "EUR": D("32.900000000000")}


def test_gke_rows_by_their_labels_and_the_nodes_fee_by_their_share(store_path: Path) -> None:
    jobs = _jobs(store_path)
    d, s = jobs[("detr-x", "gcp")], jobs[("sam-y", "gcp")]
    assert (d["spot_compute_cost"], d["restart_fees"]) == (D("18.000000000000"), D("0.450000000000"))
    assert (s["spot_compute_cost"], s["restart_fees"]) == (D("10.000000000000"), D("0.450000000000"))
    assert s["team"] == "seg"  # the pod label team beats the project's label GKE rows inherit
    assert d["team"] == "ml-platform"  # no pod team label: the project's team label, before the namespace
    assert d["interruptions"] == D("0.5") and s["interruptions"] == D("0.5")
    # kube:unallocated is no job and no team, and the pods' labels do not speak for the node's other rows
    u = jobs[("(unattributed)", "gcp")]
    assert u["spot_compute_cost"] == D("4.000000000000") and u["restart_fees"] == 0


def test_finance_export_agrees_with_the_report(store_path: Path, tmp_path: Path) -> None:
    out = tmp_path / "fin.csv"
    app.export(str(store_path), out, by="job", period="2026-07")
    with out.open(newline="") as f:
        rows = {(r["job"], r["currency"]): r for r in csv.DictReader(f)}
    # the finance file shows money to 4 places: 14.633333333333 and 9.666666666667
    assert D(rows[("llm-a", "USD")]["total_cost"]) == D("14.6333")
    assert D(rows[("rl-b", "USD")]["total_cost"]) == D("9.6667")
    assert D(rows[("detr-x", "EUR")]["total_cost"]) == D("18.45")
    assert sum(D(r["total_cost"]) for (_, c), r in rows.items() if c == "USD") == D("31.3")
    assert sum(D(r["total_cost"]) for (_, c), r in rows.items() if c == "EUR") == D("32.9")


def test_explain_a_shared_node_line_names_the_jobs_and_shares(store_path: Path) -> None:
    with billing_audit.open(store_path, read_only=True) as store:
        fee = store.con.execute("SELECT x_LineItemId FROM line_items WHERE ResourceId = ? AND EffectiveCost = 1",
                                [NODE_A]).fetchone()
        pod = store.con.execute("SELECT x_LineItemId FROM line_items WHERE x_SplitParentId = ? LIMIT 1",
                                [NODE_A]).fetchone()
    assert fee and pod
    why = app.explain(str(store_path), fee[0])
    assert why.category == "restart_fee"
    k = why.kubernetes
    assert k is not None and k["role"] == "shared_node_line" and k["node"] == NODE_A
    parts = [(p["job"], p["share"], p["gets_rounding_remainder"]) for p in k["parts"]]
    assert [(j, round(s, 12), r) for j, s, r in parts] == [
        ("rl-b", D("0.666666666667"), True), ("llm-a", D("0.333333333333"), False)]
    assert "kubernetes" in why.to_dict()
    rec = app.explain(str(store_path), pod[0]).kubernetes
    assert rec is not None and rec["role"] == "pod_record" and rec["node"] == NODE_A


def test_job_label_keys_come_from_the_config(store_path: Path) -> None:
    """Without Kubeflow's label in kubernetes_job_label_keys, llm-a's pods name no job: their node shares go to
    the unattributed row; llm-a keeps only its tagged checkpoint GETs, and the totals do not move."""
    cfg = Config(attribution=Attribution(kubernetes_job_label_keys=["ray.io/cluster"]))
    jobs = _jobs(store_path, cfg)
    assert jobs[("llm-a", "aws")]["spot_compute_cost"] == 0
    assert jobs[("llm-a", "aws")]["total_cost"] == D("0.300000000000")
    assert jobs[("rl-b", "aws")]["spot_compute_cost"] == D("9.000000000000")
    rows = [r for r in _report(store_path, cfg).jobs.iter_rows(named=True) if r["provider"] == "aws"]
    un = {r["team"]: r["spot_compute_cost"] for r in rows if r["job"] == "(unattributed)"}
    assert un == {"research": D("14.000000000000"), "(unattributed)": D("2.000000000000")}  # the namespace's team
    assert sum((r["total_cost"] for r in rows), D(0)) == D("31.300000000000")


def test_a_store_written_before_the_split_columns_gains_them(tmp_path: Path) -> None:
    """A store of an older version (its lines a table ``line_items`` of every canonical column of its day, without
    x_SplitParentId / x_SplitCost) is read as it is, and opened for writing its table becomes the store's table of
    lines behind the view: the view gives the split columns, NULL for its lines, and it takes an export with split
    cost allocation data."""
    path = tmp_path / "old.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([GKE]).errors
        store.con.execute("CREATE TABLE ba_old AS SELECT * EXCLUDE (x_SplitCost, x_SplitParentId) FROM line_items")
        store.con.execute("DROP VIEW line_items")
        store.con.execute("DROP TABLE line_items_data")
        store.con.execute("ALTER TABLE ba_old RENAME TO line_items")
        gke = store.con.execute("SELECT count(*), sum(BilledCost) FROM line_items").fetchone()
    with billing_audit.open(path, read_only=True) as store:
        assert store.con.execute("SELECT count(*), sum(BilledCost) FROM line_items").fetchone() == gke
    with billing_audit.open(path) as store:
        kinds = store.con.execute("SELECT table_name, table_type FROM information_schema.tables WHERE table_name IN "
                                  "('line_items', 'line_items_data') ORDER BY 1").fetchall()
        assert kinds == [("line_items", "VIEW"), ("line_items_data", "BASE TABLE")]
        assert store.con.execute("SELECT count(*), sum(BilledCost), count(x_SplitCost) FROM line_items").fetchone() \
            == (*gke, 0)
        assert not store.ingest([EKS]).errors
        store.tag()
        got = store.con.execute("SELECT x_Provider, count(x_SplitParentId), sum(x_SplitCost) FROM line_items "
                                "GROUP BY 1 ORDER BY 1").fetchall()
    # 5 pod-hours of 2 records each; their weights: llm-a 5 + 3 + 6, rl-b 3 + 6
    assert got == [("aws", 10, D("23.000000000000")), ("gcp", 0, None)]


def test_explain_command_lists_the_parts(store_path: Path) -> None:
    from click.testing import CliRunner

    from billing_audit.cli import main

    with billing_audit.open(store_path, read_only=True) as store:
        node = store.con.execute("SELECT x_LineItemId FROM line_items WHERE ResourceId = 'i-0e1a2b3c4d5e60002'"
                                 ).fetchone()
    assert node
    r = CliRunner().invoke(main, ["explain", node[0], "--db", str(store_path)])
    assert r.exit_code == 0, r.output
    assert "kubernetes         a line of Kubernetes node i-0e1a2b3c4d5e60002 in the hour 2026-07-10 10:00" in r.output
    assert "    llm-a / research: share 0.750000 (weight 6.0000), pod part\n" in r.output
    assert ("    (unattributed) / (unattributed): share 0.250000 (weight 2.0000), unallocated node share (the line's "
            "own attribution); takes the rounding remainder\n") in r.output


EVENTS_EKS = FIXTURES / "events" / "eks"


def test_an_interruption_event_of_a_shared_node_is_shared_by_the_hours_pods(tmp_path: Path) -> None:
    """fixtures/events/eks: one EventBridge warning for node A at 11:40, the hour llm-a (3.00) and rl-b (6.00)
    shared it: llm-a counts 1/3 = 0.333333333333 of it, rl-b 2/3 (the 1e-12 remainder to the larger part), the
    rows add up to the node's one interruption (not one each), and the estimates follow the share."""
    path = tmp_path / "ev.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([EKS, EVENTS_EKS]).errors
        store.tag()
    rep = _report(path)
    jobs = {r["job"]: r for r in rep.jobs.iter_rows(named=True) if r["provider"] == "aws"}
    a, b = jobs["llm-a"], jobs["rl-b"]
    assert (a["interruptions"], a["interruptions_source"]) == (D("0.333333333333"), "events")
    assert (b["interruptions"], b["interruptions_source"]) == (D("0.666666666667"), "events")
    assert sum((r["interruptions"] for r in jobs.values()), D(0)) == D(1)
    tot = {r["currency"]: r for r in rep.totals.iter_rows(named=True)}
    assert tot["USD"]["interruptions"] == D(1)
    # recompute: interruptions x (30 min checkpoint interval / 2) x the job's spot rate; restart idle: x 5 min
    for r in (a, b):
        rate = r["spot_hourly_cost"]
        assert r["recompute_cost_estimate"] == (r["interruptions"] * D(15) / 60 * rate).quantize(D("1e-12"))
        assert r["restart_idle_cost_estimate"] == (r["interruptions"] * D(5) / 60 * rate).quantize(D("1e-12"))
    # the same 1/3 and 2/3 the fee line gives without events: the same estimates
    fees = _jobs_of(tmp_path, [EKS])
    assert fees["llm-a"]["recompute_cost_estimate"] == a["recompute_cost_estimate"]


def _jobs_of(tmp_path: Path, inputs: list[Path]) -> dict[str, dict]:
    path = tmp_path / "plain.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest(inputs).errors
        store.tag()
    return {r["job"]: r for r in _report(path).jobs.iter_rows(named=True) if r["provider"] == "aws"}


def test_a_daily_fee_on_a_shared_node_is_shared_by_the_pods_over_its_hours(tmp_path: Path) -> None:
    """A restart fee of 1.70 on node A charged for the day (2026-07-10 00:00 to 07-11 00:00): node A ran at 10:00
    (llm-a 5, rl-b 3 of 8) and 11:00 (llm-a 3, rl-b 6 of 9), so over the day llm-a weighs 8 and rl-b 9 of 17:
    llm-a 1.70 x 8/17 = 0.80, rl-b 0.90 (not the first hour's shares, which name no pod: 00:00).  Its count
    (1 restart) by the parts (each pod-hour's record key): llm-a 5/17 = 0.294117647058 and 3/17 = 0.176470588235,
    rl-b 3/17 = 0.176470588235 and 6/17 = 0.352941176470 + the 2e-12 remainder (the largest part); beside the
    hourly fee's 1/3 and 2/3: 0.803921568626 and 1.196078431374, adding up to the two fees."""
    path = tmp_path / "day.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([EKS]).errors
        store.con.execute(f"""INSERT INTO {writable_lines(store.con)} BY NAME SELECT * REPLACE (
              x_LineItemId || '-day' AS x_LineItemId, TIMESTAMP '2026-07-10 00:00:00' AS ChargePeriodStart,
              TIMESTAMP '2026-07-11 00:00:00' AS ChargePeriodEnd, 1.70 AS EffectiveCost, 1.70 AS BilledCost,
              1.70 AS ListCost)
            FROM line_items WHERE ResourceId = ? AND EffectiveCost = 1""", [NODE_A])
        store.tag()
    rep = _report(path)
    jobs = {r["job"]: r for r in rep.jobs.iter_rows(named=True) if r["provider"] == "aws"}
    a, b, u = jobs["llm-a"], jobs["rl-b"], jobs["(unattributed)"]
    assert a["restart_fees"] == D("1.133333333333")  # 0.333333333333 + 0.80
    assert b["restart_fees"] == D("1.566666666667")  # 0.666666666667 + 0.90
    assert u["restart_fees"] == 0
    assert (a["interruptions"], b["interruptions"]) == (D("0.803921568626"), D("1.196078431374"))
    tot = {r["currency"]: r for r in rep.totals.iter_rows(named=True)}
    assert (tot["USD"]["restart_fees"], tot["USD"]["interruptions"]) == (D("2.700000000000"), D(2))
    assert tot["USD"]["total_cost"] == D("33.000000000000")  # 31.30 + 1.70


def test_no_pod_cost_warning_when_pod_records_carry_no_cost(store_path: Path) -> None:
    assert not [w for w in _report(store_path).warnings if "pod record" in w]


def test_pod_records_carrying_cost_are_named_per_currency(tmp_path: Path) -> None:
    """Two of llm-a's 11:00 pod records (vCPU 2.70, memory 0.30 of weight) given billed and effective cost 2.70 and
    0.30: the report says 2 records carry 3.00 USD of their own, counted beside node A's line."""
    path = tmp_path / "podcost.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([EKS]).errors
        store.con.execute(f"UPDATE {writable_lines(store.con)} SET BilledCost = x_SplitCost, EffectiveCost = x_SplitCost "
                          "WHERE x_SplitParentId = ? AND ChargePeriodStart = TIMESTAMP '2026-07-10 11:00:00' "
                          "AND Tags['aws_eks_namespace'] = 'research'", [NODE_A])
        store.tag()
    warn = [w for w in _report(path).warnings if "pod record" in w]
    assert warn == ["kubernetes: 2 pod record(s) of split cost allocation data carry cost of their own (USD: billed "
                    "3.00, effective 3.00); their node's line already holds that cost, so it is counted in the totals "
                    "twice: check the export (a pod record's line_item_unblended_cost is expected to be 0)"]


def test_explain_a_daily_fee_lists_the_parts_over_its_hours(tmp_path: Path) -> None:
    """The daily fee of 1.70 on node A: parts summed over node A's hours, llm-a 5 + 3, rl-b 3 + 6 of 17."""
    path = tmp_path / "dayx.duckdb"
    with billing_audit.open(path) as store:
        assert not store.ingest([EKS]).errors
        store.con.execute(f"""INSERT INTO {writable_lines(store.con)} BY NAME SELECT * REPLACE (
              x_LineItemId || '-day' AS x_LineItemId, TIMESTAMP '2026-07-10 00:00:00' AS ChargePeriodStart,
              TIMESTAMP '2026-07-11 00:00:00' AS ChargePeriodEnd, 1.70 AS EffectiveCost, 1.70 AS BilledCost,
              1.70 AS ListCost)
            FROM line_items WHERE ResourceId = ? AND EffectiveCost = 1""", [NODE_A])
        store.tag()
        day = store.con.execute("SELECT x_LineItemId FROM line_items WHERE x_LineItemId LIKE '%-day'").fetchone()
    assert day
    k = app.explain(str(path), day[0]).kubernetes
    assert k is not None and k["role"] == "shared_node_line"
    assert "charged 2026-07-10 00:00 to 2026-07-11 00:00" in k["reason"]
    got = sorted((p["job"], p["weight"], p["gets_rounding_remainder"]) for p in k["parts"])
    assert got == [("llm-a", D(3), False), ("llm-a", D(5), False), ("rl-b", D(3), False), ("rl-b", D(6), True)]
    assert sum(p["weight"] for p in k["parts"]) == D(17)  # no unallocated share: the pods cover node A's hours
    assert round(k["parts"][0]["share"], 12) == D("0.352941176471")  # rl-b's 11:00 pod, 6/17, listed first
