from support import Case

CASES = [
    Case("aws-cur2", "aws/cur2", "aws-cur2", ("line_item_unblended_cost",)),
    Case("aws-cur2-create-new", "aws/cur2-create-new", "aws-cur2", ("line_item_unblended_cost",)),
]
