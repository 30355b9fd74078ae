SELECT
  x_LineItemId,
  CONCAT(
    CAST('interruption signal: ' AS VARCHAR),
    CAST(COALESCE(ChargeDescription, x_UsageType) AS VARCHAR)
  ) AS reason
FROM line_items
WHERE
  REGEXP_LIKE(
    LOWER(
      CONCAT_WS(
        ' ',
        CAST(ChargeDescription AS VARCHAR),
        CAST(x_UsageType AS VARCHAR),
        CAST(SkuMeter AS VARCHAR)
      )
    ),
    '\b(interrupted|interruptions?|evicted|evictions?|preempted|preemptions?|reclaimed|reclamations?)\b'
  )
