"""AWS export variants real files come in (fixtures/gen_aws_variants.py)."""

from support import Case

CASES = [
    Case("aws-cur-2018-csv", "aws/cur-2018-csv", "aws-cur", ("lineItem/UnblendedCost",)),
    Case("aws-cur2-split", "aws/cur2-split", "aws-cur2", ("line_item_unblended_cost",)),
]
