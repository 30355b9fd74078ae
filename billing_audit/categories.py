"""The categories a rule tags a line with, in precedence order (one list; :mod:`billing_audit.rules` re-exports it).

A module of its own, without the rules' dependencies (sqlglot, yaml, pydantic), so that the store's DDL and the
report layer can name the categories without importing the rule loader.
"""

from __future__ import annotations

# Precedence: when a line matches rules of several categories, reports count its
# cost once, under the first category in this order.
CATEGORIES: tuple[str, ...] = (
    "restart_fee",
    "other_compute_charge",
    "storage_reread",
    "checkpoint_egress",
    "interruption_signal",
    "spot_compute",
    "on_demand_compute",
    "custom",
)
CATEGORY_DOCS: dict[str, str] = {
    "restart_fee": "per-restart fees for interrupted spot capacity",
    "other_compute_charge": "Azure 'Other Compute Charges' (other than the restart fees inside it)",
    "storage_reread": "reads of checkpoint storage (GET/HEAD, retrieval, read operations)",
    "checkpoint_egress": "data transfer out of checkpoint storage (internet, inter-region, cross-zone)",
    "interruption_signal": "lines saying a spot/preemptible resource was interrupted, evicted, preempted, reclaimed",
    "spot_compute": "spot / preemptible GPU compute",
    "on_demand_compute": "on-demand GPU compute (for the spot vs on-demand comparison)",
    "custom": "anything else a team wants to find",
}
