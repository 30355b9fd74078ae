SELECT
  x_LineItemId,
  CONCAT(
    CAST('checkpoint re-read: ' AS VARCHAR),
    CAST(COALESCE(x_UsageType, ChargeDescription) AS VARCHAR),
    CAST(' on ' AS VARCHAR),
    CAST(COALESCE(ResourceName, ResourceId, SubAccountId, '?') AS VARCHAR)
  ) AS reason
FROM line_items
WHERE
  ChargeCategory = 'Usage'
  AND (
    REGEXP_LIKE(
      LOWER(COALESCE(x_UsageType, '')),
      'requests-tier2|requests-gda-tier2|retrieval-|-bytes-retrieved|requests-int-tier2'
    )
    OR REGEXP_LIKE(
      LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(ChargeDescription AS VARCHAR))),
      'read operations|all other operations|data retrieval|class b operations|retrieval|(^|\|)read$'
    )
  )
  AND NOT REGEXP_LIKE(
    LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(ChargeDescription AS VARCHAR))),
    'requests-tier1|write operations|class a operations|list operations'
  )
  AND (
    ResourceId IN (
      SELECT
        ResourceId
      FROM checkpoint_resources
    )
    OR ARRAYS_OVERLAP(
      TRANSFORM(ARRAY['purpose', 'role'], k -> LOWER(ELEMENT_AT(Tags, k))),
      ARRAY['checkpoint', 'checkpoints', 'ckpt']
    )
  )
