SELECT
  x_LineItemId,
  CONCAT(
    CAST('checkpoint egress: ' AS VARCHAR),
    CAST(COALESCE(x_UsageType, ChargeDescription) AS VARCHAR),
    CAST(' from ' AS VARCHAR),
    CAST(COALESCE(ResourceName, ResourceId, SubAccountId, '?') AS VARCHAR)
  ) AS reason
FROM line_items
WHERE
  ChargeCategory = 'Usage'
  AND (
    REGEXP_LIKE(
      LOWER(COALESCE(x_UsageType, '')),
      'out-bytes|datatransfer-regional-bytes|datatransfer-xaz'
    )
    OR REGEXP_LIKE(
      LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(ChargeDescription AS VARCHAR))),
      '^bandwidth\||data transfer out|inter[- ]region|intra continent|egress|network .* out\b'
    )
  )
  AND NOT REGEXP_LIKE(
    LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(ChargeDescription AS VARCHAR))),
    'in-bytes|data transfer in\b|ingress'
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
