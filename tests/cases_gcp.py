from support import Case

CASES = [
    Case("gcp-billing-ndjson", "gcp/standard-ndjson", "gcp-billing", ("cost",), credits="credits"),
    Case("gcp-billing-resource-parquet", "gcp/resource-parquet", "gcp-billing-resource", ("cost",), credits="credits"),
    Case("gcp-billing-reexport", "gcp/reexport", "gcp-billing", ("cost",), credits="credits"),
]
