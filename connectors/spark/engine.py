"""Spark: the audit query on a Spark cluster (``--spark-master``, default ``local[*]``).

The lines are a parquet folder of canonical line items (what ``billing-audit lines-export`` writes,
partitioned by provider and billing period; Delta tables are parquet underneath and read the same) or
a table in the session's catalog (``--spark-table db.table``, e.g. a Hive table over that folder).
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import Field, ValidationInfo, field_validator

from billing_audit.config import Config
from billing_audit.engines.base import Engine, EngineOptions, EngineRunResult
from billing_audit.errors import BillingAuditError
from billing_audit.rules import Rule

if TYPE_CHECKING:
    from billing_audit.store import Store


PARTITIONS_ENV = "BILLING_AUDIT_SPARK_PARTITIONS"
PARTITION_BYTES_ENV = "BILLING_AUDIT_SPARK_PARTITION_BYTES"
LINES_PER_PARTITION = 250_000
MIN_PARTITIONS, MAX_PARTITIONS = 8, 192
SESSION_PARTITIONS = 8  # the session's shuffle partitions outside an audit (the lines path, the slice aggregates)
PARTITION_BYTES = "16m"
SHUFFLE = "spark.sql.shuffle.partitions"
ADVISORY = "spark.sql.adaptive.advisoryPartitionSizeInBytes"


def _forced_partitions() -> int | None:
    raw = os.environ.get(PARTITIONS_ENV, "").strip()
    if not raw:
        return None
    if not raw.isdigit() or int(raw) < 1:
        raise BillingAuditError(f"{PARTITIONS_ENV}={raw!r}: not a number of partitions (a whole number, 1 or more)")
    return int(raw)


def partitions_for(lines: int) -> int:
    """How many partitions the audit runs `lines` kept lines in: one per 250,000 lines, at least 8 and at most 192,
    unless ``BILLING_AUDIT_SPARK_PARTITIONS`` says how many.  Too few and a partition's aggregation outgrows its
    share of the driver's memory (3M lines in the 8 of before ran out of a 2 GiB driver); past 192 the tasks'
    overhead dominates on a few cores.

    >>> partitions_for(3_000_000)
    12
    """
    forced = _forced_partitions()
    if forced is not None:
        return forced
    return max(MIN_PARTITIONS, min(MAX_PARTITIONS, -(-lines // LINES_PER_PARTITION)))


def partition_bytes() -> str:
    """AQE's advisory partition size (``BILLING_AUDIT_SPARK_PARTITION_BYTES``, default 16m): the size it coalesces
    small shuffle partitions up to, kept small so each aggregation's partition fits its memory."""
    raw = os.environ.get(PARTITION_BYTES_ENV, "").strip() or PARTITION_BYTES
    if not re.fullmatch(r"[1-9][0-9]*([kmgt]b?|b)?", raw, re.I):
        raise BillingAuditError(f"{PARTITION_BYTES_ENV}={raw!r}: not a size in bytes (e.g. 16m, 64m, 1g, 1048576)")
    return raw


@contextlib.contextmanager
def shuffle_partitions(spark: Any, n: int | None) -> Iterator[None]:
    """The session's shuffle partitions set to `n` (None: left as they are) while the block runs, then restored."""
    if n is None:
        yield
        return
    before = spark.conf.get(SHUFFLE)
    spark.conf.set(SHUFFLE, str(n))
    try:
        yield
    finally:
        spark.conf.set(SHUFFLE, before)


def session(master: str = "local[*]") -> Any:
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise BillingAuditError("--engine spark needs pyspark: pip install 'billing-audit[spark]'") from None
    os.environ.setdefault("PYSPARK_PYTHON", os.sys.executable)  # type: ignore[attr-defined]
    try:
        return _builder(SparkSession, master).getOrCreate()
    except Exception as e:  # noqa: BLE001 - pyspark's PySparkRuntimeError: the JVM did not start
        if "JAVA_GATEWAY_EXITED" in str(e) or isinstance(e, FileNotFoundError):
            raise BillingAuditError("--engine spark: Spark's JVM did not start: it needs a Java runtime (17): "
                                    "install one, or set JAVA_HOME to it") from None
        raise


def _started(master: str) -> Any:
    spark = session(master)
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def _builder(SparkSession: Any, master: str) -> Any:  # noqa: N803 - the class
    partitions, advisory = _forced_partitions() or SESSION_PARTITIONS, partition_bytes()
    builder = SparkSession.builder
    if master:  # "": the master spark-submit set
        builder = builder.master(master)
    return (
        builder.appName("billing-audit")
        .config("spark.sql.session.timeZone", "UTC")
        .config("spark.ui.enabled", "false")
        .config(SHUFFLE, str(partitions))
        .config(ADVISORY, advisory)
        .config("spark.driver.bindAddress", "127.0.0.1")
        .config("spark.driver.host", "127.0.0.1")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", os.environ.get("BILLING_AUDIT_SPARK_DRIVER_MEMORY", "2g"))
        # the status store keeps every SQL execution with its plan, UI or not: the audit's plans are large and a
        # long-lived session (a notebook, a test run) runs many, so keep only the last few
        .config("spark.sql.ui.retainedExecutions", "4")
        .config("spark.ui.retainedJobs", "16")
        .config("spark.ui.retainedStages", "16")
        .config("spark.ui.retainedTasks", "2000")
        .config("spark.sql.maxPlanStringLength", "65536")
    )


def _reason(e: Exception) -> str:
    """Spark's message without the JVM stack: the py4j line and the Java exception's own line."""
    lines = [x.strip() for x in str(e).splitlines() if x.strip() and not x.strip().startswith("at ")]
    return " ".join(lines[:3])[:600] or type(e).__name__


def check_rules(spark: Any, rule_sql: dict[str, str], paths: dict[str, str]) -> None:
    """Let Spark analyse each rule (no data is read): a function or column Spark lacks names its rule."""
    for rid, sql in rule_sql.items():
        try:
            spark.sql(sql).schema  # noqa: B018 - analysis happens here
        except Exception as e:  # noqa: BLE001 - Spark's AnalysisException
            first = str(e).strip().splitlines()[0] if str(e).strip() else type(e).__name__
            raise BillingAuditError(f"{paths.get(rid, rid)}: rule {rid} cannot run on spark: {first}") from None


_SPARK_TYPE = {"VARCHAR": "STRING"}


def small_table(spark: Any, columns: list[tuple[str, str]], rows: list[tuple[Any, ...]]) -> Any:
    """A small table from the driver (the price references, the bill's unit prices) as a DataFrame of exactly
    these types (DECIMAL(38,12) stays DECIMAL), hinted to be broadcast to the executors.  Times are the store's
    UTC wall times: marked UTC, so the driver's own time zone does not move them."""
    from datetime import UTC, datetime

    from pyspark.sql.functions import broadcast

    schema = ", ".join(f"`{n}` {_SPARK_TYPE.get(t, t)}" for n, t in columns)
    data = [tuple(v.replace(tzinfo=UTC) if isinstance(v, datetime) and v.tzinfo is None else v for v in r)
            for r in rows]
    return broadcast(spark.createDataFrame(data, schema=schema))


def persisted(spark: Any) -> set[int]:
    """The ids of the RDDs the session holds (cached or checkpointed), to :func:`release` what a run adds."""
    return {int(k) for k in spark.sparkContext._jsc.getPersistentRDDs().keySet()}


def release(spark: Any, before: set[int]) -> None:
    """Drop the blocks of every RDD the session holds that `before` (:func:`persisted`) did not: a checkpointed
    DataFrame's ``unpersist`` does not free its checkpoint, and a long-lived session (a notebook, a test run, a
    driver auditing month after month) would keep every run's steps."""
    held = spark.sparkContext._jsc.getPersistentRDDs()
    for k in list(held.keySet()):
        if int(k) not in before:
            held.get(k).unpersist(True)


def run(steps: list[tuple[str, str]], lines: str, master: str = "local[*]",
        rule_sql: dict[str, str] | None = None, rule_paths: dict[str, str] | None = None,
        frame: Any = None, partitions: int | None = None,
        tables: dict[str, tuple[list[tuple[str, str]], list[tuple[Any, ...]]]] | None = None) -> list[tuple[Any, ...]]:
    """Run the audit steps (Spark SQL) with `lines` (a parquet folder, or a catalog table name) as
    line_items: each step a temp view, materialised as it is made (a local checkpoint); returns the last step's
    rows.  Materialised, a step is a scan of its rows in the steps that read it: left as a view, or only cached,
    its plan would be copied into every reference to it, and the last step's plan (the whole audit, views in
    views) took Spark a minute to plan on a 20-line export and filled a 2 GiB driver after a few runs.
    `frame`: the lines as a DataFrame already (the raw exports mapped: ``connectors.spark.raw``); `partitions`:
    the shuffle partitions the steps run in (:func:`partitions_for`; None: the session's), restored after;
    `tables`: small tables from the driver the steps read (name: columns, rows; :func:`small_table`).  A step of
    ``engine_prices.DRIVER_STEPS`` is collected and comes back as the driver's table of that name."""
    from billing_audit.engines import priced as engine_prices

    spark = session(master)
    if frame is not None:
        df = frame
    elif Path(lines).exists():  # absolute: the JVM's working folder is where it started, not ours
        try:
            df = spark.read.option("mergeSchema", "true").parquet(str(Path(lines).resolve()))
        except Exception as e:  # noqa: BLE001
            raise BillingAuditError(f"--spark-lines {lines}: Spark cannot read it: {_reason(e)}") from None
    else:
        try:
            df = spark.table(lines)
        except Exception as e:  # noqa: BLE001 - Spark raises its own AnalysisException
            raise BillingAuditError(f"--spark-lines {lines}: neither a folder nor a table Spark knows ({e})") from None
    df.createOrReplaceTempView("line_items")
    spark.sparkContext.setLogLevel("ERROR")
    if rule_sql:
        names = [n for n, _ in steps]
        upto = names.index("hits") if "hits" in names else 0
        try:
            for name, sql in steps[:upto]:  # the relations rules may read (checkpoint_resources)
                spark.sql(sql).createOrReplaceTempView(name)
        except Exception as e:  # noqa: BLE001
            raise BillingAuditError(f"Spark could not read the lines as canonical line items: {_reason(e)}") from None
        check_rules(spark, rule_sql, rule_paths or {})
    given = dict(tables or {})
    held = persisted(spark)
    try:
        with shuffle_partitions(spark, partitions):
            for name, (columns, data) in given.items():
                small_table(spark, columns, data).createOrReplaceTempView(name)
            for name, sql in steps[:-1]:
                step = spark.sql(sql)
                if name in engine_prices.DRIVER_STEPS:
                    step = small_table(spark, *engine_prices.driver_table(name, [tuple(r) for r in step.collect()]))
                else:
                    step = step.localCheckpoint(eager=True)
                step.createOrReplaceTempView(name)
            rows = spark.sql(steps[-1][1]).collect()
    except Exception as e:  # noqa: BLE001
        from connectors.spark.raw import refusal

        found = refusal(str(e))  # a value an export file's mapping refused (the raw path maps as it runs)
        if found is not None:
            raise found from None
        raise BillingAuditError(f"Spark could not run the audit query: {_reason(e)}") from None
    finally:
        release(spark, held)
        for name in [*(n for n, _ in steps[:-1]), *given]:  # the session outlives the run: leave no views
            spark.catalog.dropTempView(name)
        spark.catalog.dropTempView("line_items")
    return [tuple(r) for r in rows]


class SparkOptions(EngineOptions):
    spark_master: str = Field("local[*]", description="Spark: the master URL.",
                              json_schema_extra={"flag": "--spark-master"})
    spark_lines: str | None = Field(
        None, description="Spark: canonical lines as a parquet folder or catalog table (default: the store's "
                          "lines, written next to it as by `billing-audit lines-export`).",
        json_schema_extra={"flag": "--spark-lines", "metavar": "PATH|TABLE"})
    spark_source: Literal["lines", "raw"] = Field(
        "lines", description="Spark: `lines` (canonical lines: --spark-lines or the store's) or `raw` (the providers' "
                             "parquet export files, grouped into deliveries and mapped as local ingest does; "
                             "`audit PATHS --source raw` reads PATHS without ingesting them).",
        json_schema_extra={"flag": "--source"})
    spark_raw: str | None = Field(
        None, description="Spark: the export folder --source raw reads (several: joined by the path separator, "
                          "':' on Linux); `audit` takes its PATHS.",
        json_schema_extra={"flag": "--spark-raw", "metavar": "FOLDER"})

    spark_write_lines: str | None = Field(
        None, description="Spark --source raw: also write the kept canonical lines there, as parquet partitioned by "
                          "x_Provider and billing_period (the layout of `billing-audit lines-export`: "
                          "`--spark-lines URI` reads them); a folder it wrote before is replaced whole, any other "
                          "non-empty one refused.",
        json_schema_extra={"flag": "--spark-write-lines", "metavar": "URI"})

    @field_validator("spark_write_lines")
    @classmethod
    def _raw_only(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is not None and info.data.get("spark_source") != "raw":
            raise ValueError("only with --source raw, whose kept lines it writes (`billing-audit lines-export` "
                             "writes the store's)")
        return value

    def raw_paths(self) -> list[str]:
        """The folders, files and lake URIs --source raw reads (``s3a://...`` survives the path separator)."""
        return split_sources(self.spark_raw or "")


def split_sources(text: str) -> list[str]:
    """Paths joined by the path separator, URIs among them: ``a:s3a://b/k`` is ``a`` and ``s3a://b/k``."""
    from billing_audit.reader import is_uri

    out: list[str] = []
    for part in text.split(os.pathsep):
        if out and "/" not in out[-1] and is_uri(f"{out[-1]}:{part}"):
            out[-1] = f"{out[-1]}:{part}"
        else:
            out.append(part)
    return [p for p in out if p]


class SparkEngine(Engine):
    """The audit's steps as Spark SQL views over a parquet folder or catalog table of canonical lines
    (by default the store's own lines, written next to the store first)."""

    name = "spark"
    Options = SparkOptions

    def reads_store(self, options: Any) -> bool:
        assert isinstance(options, SparkOptions)
        # the store's lines, written next to it for Spark (unless the lines are given, or the raw exports)
        return options.spark_lines is None and options.spark_source == "lines"

    def reads_paths(self, options: Any) -> bool:
        assert isinstance(options, SparkOptions)
        return options.spark_source == "raw"

    def with_paths(self, options: Any, paths: Sequence[str | Path]) -> SparkOptions:
        assert isinstance(options, SparkOptions)
        return options.model_copy(update={"spark_raw": os.pathsep.join(str(p) for p in paths)})

    def dry_run(self, options: Any) -> str | None:
        """--source raw: the deliveries a run would read, which are kept or superseded (Spark reads only the
        columns that decide it), which are refused, and their sizes."""
        assert isinstance(options, SparkOptions)
        if options.spark_source != "raw":
            return None
        from billing_audit.config import load_config
        from connectors.spark import raw

        with raw.plan_sources(self._raw_paths(options), spark=lambda: _started(options.spark_master)) as plan:
            kept = None
            if plan.readable:
                spark = _started(options.spark_master)
                try:
                    policy = load_config(None).overlap_policy()  # ./billing-audit.toml's [exports], as ingest's
                    kept = raw.keep_newest(spark, plan, raw.mapped_lines(spark, plan), policy)
                except BillingAuditError as e:  # a file Spark cannot map, an overlap: said, beside the plan
                    return raw.describe(plan, None) + f"\nSpark cannot settle the slices: {e}"
            return raw.describe(plan, kept)

    @staticmethod
    def _raw_paths(options: SparkOptions) -> list[str]:
        from billing_audit.reader import is_uri

        paths = options.raw_paths()
        if not paths:
            raise BillingAuditError("--source raw: name the export folder (--spark-raw FOLDER, or audit's PATHS)")
        missing = [p for p in paths if not is_uri(p) and not Path(p).exists()]
        if missing:
            raise BillingAuditError(f"--spark-raw: no such file or folder: {', '.join(missing)} (nothing was audited)")
        return paths

    def source(self, store: Store, options: Any) -> str:
        assert isinstance(options, SparkOptions)
        if options.spark_source == "raw":
            from billing_audit.reader import is_uri

            return "raw:" + os.pathsep.join(p if is_uri(p) else str(Path(p).resolve()) for p in options.raw_paths())
        return options.spark_lines or str(store.path) + ".lines"

    def run(self, store: Store, rules: Sequence[Rule], cfg: Config, period: str | None, basis: str,
            params: dict[str, Any], checkpoint: dict[str, Any] | None, options: Any) -> EngineRunResult:
        from billing_audit.engines import pipeline, write_lines

        assert isinstance(options, SparkOptions)
        from billing_audit.engines import priced as engine_prices

        steps = pipeline.engine_steps("spark", rules, cfg, period, basis, params, checkpoint, priced=True)
        tables = engine_prices.tables(store.con)  # the price references, broadcast to the executors
        if options.spark_source == "raw":
            return self._run_raw(store, steps, rules, params, options, cfg, tables)
        lines = options.spark_lines
        if lines is None:
            lines = self.source(store, options)
            write_lines(store, Path(lines), period)
        rule_sql = pipeline.check_rules(rules, "spark", params)
        rows = run(steps, lines, options.spark_master, rule_sql, {r.id: str(r.path) for r in rules}, tables=tables)
        return EngineRunResult(rows, ";\n".join(f"-- {n}\n{s}" for n, s in steps), None, lines)

    def _run_raw(self, store: Store, steps: list[tuple[str, str]], rules: Sequence[Rule], params: dict[str, Any],
                 options: SparkOptions, cfg: Config, tables: dict[str, Any]) -> EngineRunResult:
        from billing_audit.engines import pipeline
        from connectors.spark import raw

        if options.spark_lines:
            raise BillingAuditError("--source raw reads the export files: --spark-lines does not apply")
        paths = self._raw_paths(options)
        source = self.source(store, options)
        rule_sql = pipeline.check_rules(rules, "spark", params)
        # its temporary copies (zip members, a lake's staged files, ...) last until the lines are read
        with raw.plan_sources(paths, spark=lambda: _started(options.spark_master)) as plan:
            raw.refuse_errors(plan)
            # the interruption event files beside the exports: into the store, where the report reads them (the
            # restart windows and interruption counts of the engine's aggregates), said as local ingest says them
            for told in raw.load_events(store.con, plan):
                print(f"note: {told}", file=sys.stderr)
            spark = _started(options.spark_master)
            held = persisted(spark)  # the files' mappings and the kept lines, checkpointed: released after
            try:
                target = raw.lines_target(spark, options.spark_write_lines) if options.spark_write_lines else None
                lines = raw.mapped_lines(spark, plan)
                kept = raw.keep_newest(spark, plan, lines, cfg.overlap_policy())
                for told in kept.notes:  # what an overlap of exports counted once or set aside: said, as local ingest says it
                    print(f"note: {told}", file=sys.stderr)
                # the kept lines materialised once, in partitions for their number: the audit's steps then plan over a
                # small relation, not the mappings, and each partition's aggregation fits its share of the memory
                partitions = partitions_for(kept.lines)
                try:
                    frame = raw.kept_lines(lines, kept, partitions).localCheckpoint(eager=True)
                except Exception as e:  # noqa: BLE001 - a value a mapping refused
                    raise raw.input_error(e) from None
                if target is not None:
                    raw.write_lines(frame, target, kept.lines)
                rows = run(steps, source, options.spark_master, rule_sql, {r.id: str(r.path) for r in rules}, frame=frame,
                           partitions=partitions, tables=tables)
            finally:
                release(spark, held)
        return EngineRunResult(rows, ";\n".join(f"-- {n}\n{s}" for n, s in steps), None, source)
