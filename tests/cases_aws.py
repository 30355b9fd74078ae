from support import Case

CASES = [
    Case("aws-cur-legacy-parquet", "aws/cur-legacy-parquet", "aws-cur", ("line_item_unblended_cost",)),
    Case("aws-cur-legacy-csv", "aws/cur-legacy-csv", "aws-cur", ("lineItem/UnblendedCost",)),
]
