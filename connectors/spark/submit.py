"""The audit of raw exports as a Spark job: ``spark-submit`` runs this module's :func:`main`.

It runs the audit (rules, attribution, aggregation) over the providers' raw export files on the cluster
(:mod:`connectors.spark.raw`) and stores the aggregates that come back in a billing-audit store on the driver;
``billing-audit report --engine spark --source raw --spark-raw SAME_PATHS --db STORE`` then reuses that run
(same source, period, cost basis, config and rules) to write the report without running Spark again.
The driver must see the store's folder: deploy mode ``client`` (the default).

    spark-submit --master 'local[2]' connectors/spark/submit.py --db audit.duckdb exports/
    python -m connectors.spark.submit --master 'local[2]' --db audit.duckdb exports/   # without spark-submit
    python -m connectors.spark.submit --dry-run exports/      # the deliveries, kept/superseded, sizes
    spark-submit connectors/spark/submit.py --db audit.duckdb --spark-write-lines s3a://lake/lines/ exports/
    spark-submit --packages org.apache.hadoop:hadoop-aws:3.4.1 connectors/spark/submit.py --db audit.duckdb \
        s3a://billing/cur/gpu-estate/      # the exports where they land (connectors.spark.lake)

With the package installed on the cluster's Python (or shipped: ``--py-files billing_audit.zip``, a zip of
``billing_audit`` and ``connectors`` built from a checkout, plus the wheel's dependencies installed on the
nodes), the script path is ``$(python -c 'import connectors.spark.submit as m; print(m.__file__)')``.
Under spark-submit the master is spark-submit's (``--master`` here only for a plain ``python`` run).
Exit codes: 0 done, 2 an input or configuration error (one ``error:`` line on stderr).
"""

from __future__ import annotations

import argparse
import os
import sys

from billing_audit.errors import BillingAuditError


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="connectors.spark.submit", description=__doc__.split("\n\n")[0])
    p.add_argument("paths", nargs="+", help="export folders or files, local or lake URIs (s3a://, abfss://, gs://)")
    p.add_argument("--db", default="billing-audit.duckdb", help="the store the aggregates land in")
    p.add_argument("--config", default=None, help="billing-audit.toml")
    p.add_argument("--period", default=None, help="YYYY-MM (default: every period)")
    p.add_argument("--cost-basis", default="effective", choices=["effective", "billed", "list"])
    p.add_argument("--master", default="", help="Spark master (default: spark-submit's, else local[*])")
    p.add_argument("--dry-run", action="store_true", help="list the deliveries; run nothing, write nothing")
    p.add_argument("--spark-write-lines", default=None, metavar="URI",
                   help="also write the kept canonical lines there (the layout of `billing-audit lines-export`)")
    return p


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        return _main(args)
    except BillingAuditError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _main(args: argparse.Namespace) -> int:
    from billing_audit import store as stores
    from billing_audit.config import load_config
    from billing_audit.engines import engine, run_engine
    from billing_audit.rules import load_rules
    from billing_audit.store import checkpoint_params
    from connectors.spark.engine import SparkOptions

    opts = SparkOptions(spark_master=args.master or ("" if "SPARK_ENV_LOADED" in os.environ else "local[*]"),
                        spark_lines=None, spark_source="raw", spark_raw=os.pathsep.join(args.paths),
                        spark_write_lines=args.spark_write_lines)
    if args.dry_run:
        print(engine("spark").dry_run(opts))
        return 0
    cfg = load_config(args.config)
    rules = load_rules().rules
    checkpoint = cfg.checkpoint_settings()
    with stores.open(args.db) as store:
        run_id = run_engine(store, "spark", rules, cfg, args.period, args.cost_basis,
                            checkpoint_params(rules, checkpoint), checkpoint, options=opts)
        n = store.con.execute("SELECT count(*) FROM engine_results WHERE run_id = ?", [run_id]).fetchone()
    print(f"spark run {run_id} over {opts.spark_raw}: {int(n[0]) if n else 0} aggregate rows stored in {args.db}")
    if args.spark_write_lines:
        print(f"the kept lines written to {args.spark_write_lines} (`--spark-lines {args.spark_write_lines}` reads them)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
