"""What ``billing-audit validate`` checks a FOCUS file for: the specification's mandatory columns, its allowed
values and the relationships between its cost columns.

Ids follow the FinOps Foundation validator's style, ``<Column>-C-<nnn>-<M|C|O>`` (mandatory, conditional,
optional requirement); the values are checked as billing-audit reads them (the canonical columns).
"""

from __future__ import annotations

from billing_audit.formats import Check

# FOCUS 1.0 to 1.2: the columns a conformant export must have.
MANDATORY = ("BilledCost", "BillingAccountId", "BillingAccountName", "BillingCurrency", "BillingPeriodEnd",
             "BillingPeriodStart", "ChargeCategory", "ChargeClass", "ChargeDescription", "ChargePeriodEnd",
             "ChargePeriodStart", "ContractedCost", "EffectiveCost", "InvoiceIssuerName", "ListCost",
             "PricingQuantity", "PricingUnit", "ProviderName", "PublisherName", "ServiceCategory", "ServiceName")

CHARGE_CATEGORIES = ("Usage", "Purchase", "Tax", "Credit", "Adjustment")
PRICING_CATEGORIES = ("Standard", "Dynamic", "Committed", "Other")
CHARGE_FREQUENCIES = ("One-Time", "Recurring", "Usage-Based")


def _among(values: tuple[str, ...]) -> str:
    return ", ".join("'" + v + "'" for v in values)


CHECKS: tuple[Check, ...] = (
    *(Check(f"{c}-C-000-M", "warning", f"{c} is a mandatory FOCUS column and the file lacks it", column=c)
      for c in MANDATORY),
    Check("BilledCost-C-001-M", "warning", "BilledCost must not be null", where="BilledCost IS NULL",
          where_column="BilledCost"),
    Check("BillingCurrency-C-001-M", "warning", "BillingCurrency must not be null", where="BillingCurrency IS NULL",
          where_column="BillingCurrency"),
    Check("ChargeCategory-C-001-M", "warning", f"ChargeCategory must be one of {', '.join(CHARGE_CATEGORIES)}",
          where=f"ChargeCategory IS NULL OR ChargeCategory NOT IN ({_among(CHARGE_CATEGORIES)})",
          where_column="ChargeCategory"),
    Check("ChargeClass-C-001-M", "warning", "ChargeClass must be null or Correction",
          where="ChargeClass IS NOT NULL AND ChargeClass <> 'Correction'", where_column="ChargeClass"),
    Check("PricingCategory-C-001-C", "warning", f"PricingCategory must be null or one of {', '.join(PRICING_CATEGORIES)}",
          where=f"PricingCategory IS NOT NULL AND PricingCategory NOT IN ({_among(PRICING_CATEGORIES)})",
          where_column="PricingCategory"),
    Check("ChargeFrequency-C-001-O", "warning", f"ChargeFrequency must be null or one of {', '.join(CHARGE_FREQUENCIES)}",
          where=f"ChargeFrequency IS NOT NULL AND ChargeFrequency NOT IN ({_among(CHARGE_FREQUENCIES)})",
          where_column="ChargeFrequency"),
    Check("ChargePeriodEnd-C-001-M", "warning", "ChargePeriodEnd must not be before ChargePeriodStart",
          where="ChargePeriodEnd < ChargePeriodStart", where_column="ChargePeriodEnd"),
    Check("ListCost-C-002-M", "warning", "ListCost is below EffectiveCost on a usage line that is not a correction "
          "(the list cost is the undiscounted one)",
          where="ListCost IS NOT NULL AND EffectiveCost IS NOT NULL AND ChargeClass IS NULL AND ChargeCategory = 'Usage' "
                "AND EffectiveCost > 0 AND ListCost < EffectiveCost", where_column="ListCost"),
)
