from support import Case

CASES = [
    Case("aws-focus-1.2-parquet", "focus/aws-focus-1.2", "aws-focus", ("billedcost",)),
    Case("azure-focus-1.2-csv", "focus/azure-focus-1.2", "azure-focus", ("BilledCost",)),
    Case("focus-gcp-1.0-csv", "focus/gcp-focus-1.0", "focus", ("BilledCost",)),
]
