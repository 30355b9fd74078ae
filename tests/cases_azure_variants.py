"""Azure export variants real files come in (fixtures/gen_azure_variants.py)."""

from support import Case

CASES = [
    Case("azure-payg-mosp-csv", "azure/payg-mosp-csv", "azure-usage-details-payg", ("PreTaxCost",)),
    Case("azure-payg-mosp-camel-csv", "azure/payg-mosp-camel-csv", "azure-usage-details-payg", ("preTaxCost",)),
    Case("azure-localised-csv", "azure/localised-csv", "azure-usage-details-payg", ("PreTaxCost (PreTaxCost)",)),
    Case("azure-ea-currency-column", "azure/ea-currency-column", "azure-cost-details", ("CostInBillingCurrency",)),
    Case("azure-payg-parquet", "azure/payg-parquet", "azure-usage-details-payg", ("preTaxCost",)),
]
