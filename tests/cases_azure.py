from support import Case

CASES = [
    Case("azure-ea-actual-csv", "azure/ea-actual-csv", "azure-cost-details", ("CostInBillingCurrency",)),
    Case("azure-mca-actual-csv-gz", "azure/mca-actual-csv-gz", "azure-cost-details", ("costInBillingCurrency",)),
    Case("azure-ea-old-parquet", "azure/ea-old-parquet", "azure-cost-details", ("Cost",)),
    Case("azure-ea-legacy-manifest", "azure/ea-legacy-manifest", "azure-cost-details", ("Cost",)),
    Case("azure-snapshots", "azure/snapshots", "azure-cost-details", ("CostInBillingCurrency",)),
]
