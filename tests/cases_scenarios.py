from support import Case

CASES = [
    Case("scenario-aws-cur-csv", "scenarios/aws-cur-csv", "aws-cur", ("lineItem/UnblendedCost",)),
    Case("scenario-azure-ea-eur", "scenarios/azure-ea-eur", "azure-cost-details", ("CostInBillingCurrency",)),
]
