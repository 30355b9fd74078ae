"""billing-audit.toml: attribution keys, estimates and budgets.  Every key is optional.

>>> from billing_audit.config import load_config
>>> cfg = load_config(None)          # defaults, or ./billing-audit.toml when present
>>> cfg.estimates.restart_minutes
5.0
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any, Literal

from billing_audit.deliveries import OverlapPolicy
from billing_audit.errors import BillingAuditError

DEFAULT_FILE = "billing-audit.toml"

# What marks checkpoint storage when the config says nothing (the built-in rules BA030/BA040 declare the same
# defaults for their parameters; a test keeps them equal).
CHECKPOINT_TAG_KEYS: tuple[str, ...] = ("purpose", "role")
CHECKPOINT_TAG_VALUES: tuple[str, ...] = ("checkpoint", "checkpoints", "ckpt")
CHECKPOINT_NAME_PATTERNS: tuple[str, ...] = ("%checkpoint%", "%ckpt%")


KUBERNETES_JOB_LABEL_KEYS = (
    "training.kubeflow.org/job-name",  # Kubeflow training operator (PyTorchJob, TFJob, MPIJob, ...)
    "ray.io/cluster",  # KubeRay: the Ray cluster a job's pods form
    "volcano.sh/job-name",  # Volcano
    "jobset.sigs.k8s.io/jobset-name",  # JobSet
    "batch.kubernetes.io/job-name",  # a Kubernetes Job's pods (1.27+)
    "job-name",  # the same, older spelling
)

# The config's tables are plain dataclasses: the defaults (no config file, the usual case) cost no import.  A
# file is validated against the same classes by pydantic (imported then: Config.from_dict), unknown keys refused
# (``__pydantic_config__``), each bound (gt, ge, le) read by pydantic from the field's metadata.
_STRICT: Any = {"extra": "forbid"}


def _gt0(default: Any) -> Any:
    return field(default=default, metadata={"gt": 0})


def _ge0(default: Any) -> Any:
    return field(default=default, metadata={"ge": 0})


# A restart window is at most this many charge periods after the interruption's (hourly lines: 416 days; daily:
# 27 years): beyond any real window, and the window's start stays a 64-bit count of microseconds for charge
# periods of up to a year (report._link_ctes).
MAX_WINDOW_PERIODS = 10_000


def _window(default: Any) -> Any:
    return field(default=default, metadata={"ge": 0, "le": MAX_WINDOW_PERIODS})


@dataclass
class Attribution:
    __pydantic_config__ = _STRICT
    job_tag_keys: list[str] = field(default_factory=lambda: ["training-job", "training_job", "job", "job-id", "job_id"])
    team_tag_keys: list[str] = field(default_factory=lambda: ["team", "cost-center", "costcenter", "owner"])
    checkpoint_tag_keys: list[str] = field(default_factory=lambda: list(CHECKPOINT_TAG_KEYS))
    checkpoint_tag_values: list[str] = field(default_factory=lambda: list(CHECKPOINT_TAG_VALUES))
    checkpoint_resources: list[str] = field(default_factory=list)
    resource_map: str | None = None
    account_teams: dict[str, str] = field(default_factory=dict)
    # Kubernetes pod labels that name a training job (after job_tag_keys): the training operators' own labels.
    # Looked up as the bill spells imported labels: the key itself, with non-alphanumerics as "_", and "k8s-label/<key>".
    kubernetes_job_label_keys: list[str] = field(default_factory=lambda: list(KUBERNETES_JOB_LABEL_KEYS))
    # a pod's team, when no team key names it: its Kubernetes namespace (kube:unallocated and the like excluded)
    kubernetes_namespace_team: bool = True


@dataclass
class JobEstimate:
    __pydantic_config__ = _STRICT
    checkpoint_interval_minutes: float | None = _gt0(None)
    restart_minutes: float | None = _ge0(None)
    restart_window_periods: int | None = _window(None)  # N charge periods after an interruption's


# Restart windows: checkpoint re-reads and egress count as interruption overhead in the charge period that holds
# an interruption of the same job and the next N charge periods.  Hourly exports: the interruption's hour and the
# 3 after (a replacement waits for capacity, then reads the checkpoint); daily exports: the day and the next (an
# interruption late in the day is re-read after midnight).
HOURLY_WINDOW = 3
DAILY_WINDOW = 1


@dataclass
class Estimates:
    __pydantic_config__ = _STRICT
    enabled: bool = True
    checkpoint_interval_minutes: float = _gt0(30)
    restart_minutes: float = _ge0(5)
    restart_window_hourly_periods: int = _window(HOURLY_WINDOW)
    restart_window_daily_periods: int = _window(DAILY_WINDOW)
    jobs: dict[str, JobEstimate] = field(default_factory=dict)


@dataclass
class BudgetLimits:
    __pydantic_config__ = _STRICT
    interruption_fees_per_job: Decimal | None = _ge0(None)  # restart fees a job may have a month
    max_savings_erosion_pct: float | None = _ge0(None)


CURRENCY_KEY = re.compile(r"[A-Z]{3}")


@dataclass
class Budgets(BudgetLimits):
    """``[budgets]`` and ``[budgets.USD]``, ``[budgets.EUR]``, ...: a currency's own table applies to rows billed
    in it; the plain ``[budgets]`` keys to every billing currency without a table of its own."""

    currencies: dict[str, BudgetLimits] = field(default_factory=dict)

    def for_currency(self, currency: str) -> tuple[BudgetLimits, str]:
        """The limits for rows billed in `currency`, and the config table they come from."""
        if currency in self.currencies:
            return self.currencies[currency], f"budgets.{currency}"
        return self, "budgets"


@dataclass
class Exports:
    """``[exports]``: which export counts lines that two exports of one billing account and period both deliver."""

    __pydantic_config__ = _STRICT
    keep: Literal["larger", "both"] = "larger"
    prefer: list[str] = field(default_factory=list)


@dataclass
class Config:
    __pydantic_config__ = _STRICT
    attribution: Attribution = field(default_factory=Attribution)
    exports: Exports = field(default_factory=Exports)
    estimates: Estimates = field(default_factory=Estimates)
    budgets: Budgets = field(default_factory=Budgets)
    source: str | None = None  # the file it came from
    resource_rows: list[dict[str, str]] = field(default_factory=list)  # the resource map, read

    def checkpoint_settings(self) -> dict[str, Any]:
        a = self.attribution
        return {"tag_keys": a.checkpoint_tag_keys, "tag_values": a.checkpoint_tag_values,
                "resources": a.checkpoint_resources}

    def overlap_policy(self) -> OverlapPolicy:
        return OverlapPolicy(keep=self.exports.keep, prefer=tuple(self.exports.prefer))

    def window_overrides(self) -> dict[str, int]:
        """Jobs with their own restart window (charge periods after the interruption's), by job name."""
        return {j.strip().lower(): o.restart_window_periods for j, o in self.estimates.jobs.items()
                if o.restart_window_periods is not None}

    def job_minutes(self, job: str) -> tuple[float, float]:
        """(checkpoint interval, restart minutes) for a job, with its overrides."""
        o = self.estimates.jobs.get(job)
        interval = o.checkpoint_interval_minutes if o and o.checkpoint_interval_minutes else None
        restart = o.restart_minutes if o and o.restart_minutes is not None else None
        return (interval or self.estimates.checkpoint_interval_minutes,
                self.estimates.restart_minutes if restart is None else restart)

    @classmethod
    def from_dict(cls, raw: dict[str, Any]) -> Config:
        """A config from a file's tables (``[budgets.USD]`` and the like as TOML gives them): keys and types
        checked by pydantic against these classes, bounds too (their fields' metadata).  Raises ValueError naming the
        key (``"key 'estimates.restart_minutes': ..."``, ``"unknown key 'surprise'"``)."""
        from pydantic import TypeAdapter, ValidationError

        raw = dict(raw)
        for reserved in ("source", "resource_rows"):
            if reserved in raw:
                raise ValueError(f"unknown key {reserved!r}")
        budgets = raw.get("budgets")
        if isinstance(budgets, dict):
            budgets = dict(budgets)
            if "currencies" in budgets:
                raise ValueError("unknown key 'budgets.currencies' (a currency's budgets are [budgets.USD], ...)")
            cur = {k: budgets.pop(k) for k in list(budgets) if isinstance(k, str) and CURRENCY_KEY.fullmatch(k)}
            if cur:
                budgets["currencies"] = cur
            raw["budgets"] = budgets
        try:
            cfg = TypeAdapter(cls).validate_python(raw)
        except ValidationError as e:
            err = e.errors()[0]
            key = ".".join(str(p) for p in err["loc"] if p != "currencies")
            if err["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
                raise ValueError(f"unknown key {key!r}") from None
            raise ValueError(f"key {key!r}: {err['msg']} (got {err.get('input')!r})") from None
        return cfg


def load_config(path: str | Path | None) -> Config:
    """Read the config: ``path``, else ./billing-audit.toml if it exists, else defaults."""
    explicit = path is not None
    file = Path(path) if path is not None else Path(DEFAULT_FILE)
    if not file.exists():
        if explicit:
            raise BillingAuditError(f"{file}: config file not found")
        return Config()
    import tomllib  # here: a report without a config file needs none

    try:
        raw = tomllib.loads(file.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise BillingAuditError(f"{file}: not a valid TOML file: {e}") from None
    try:
        cfg = Config.from_dict(raw)
    except ValueError as e:
        raise BillingAuditError(f"{file}: {e}") from None
    cfg.source = str(file)
    if cfg.attribution.resource_map:
        cfg.resource_rows = read_resource_map(file.parent / cfg.attribution.resource_map)
    return cfg


def read_resource_map(path: Path) -> list[dict[str, str]]:
    """CSV with columns resource (an id, or a name pattern with * and ?), job, team."""
    if not path.exists():
        raise BillingAuditError(f"key 'attribution.resource_map': file {path} not found")
    with open(path, newline="", encoding="utf-8-sig") as f:
        reader = csv.DictReader(f)
        cols = {c.strip().lower() for c in reader.fieldnames or []}
        if "resource" not in cols or not ({"job", "team"} & cols):
            raise BillingAuditError(f"{path}: the resource map needs a 'resource' column and 'job' and/or 'team'")
        rows = []
        for i, row in enumerate(reader, start=2):
            r = {k.strip().lower(): (v or "").strip() for k, v in row.items() if k}
            if not r.get("resource"):
                raise BillingAuditError(f"{path}, line {i}: empty 'resource'")
            rows.append({"resource": r["resource"], "job": r.get("job", ""), "team": r.get("team", "")})
    return rows
