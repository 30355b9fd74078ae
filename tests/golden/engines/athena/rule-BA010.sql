SELECT
  x_LineItemId,
  CONCAT(
    CAST('restart fee: ' AS VARCHAR),
    CAST(COALESCE(ChargeDescription, x_UsageType) AS VARCHAR),
    CAST(' (' AS VARCHAR),
    CAST(COALESCE(CAST(ConsumedQuantity AS VARCHAR), '?') AS VARCHAR),
    CAST(' ' AS VARCHAR),
    CAST(COALESCE(ConsumedUnit, 'units') AS VARCHAR),
    CAST(')' AS VARCHAR)
  ) AS reason
FROM line_items
WHERE
  ChargeCategory IN ('Usage', 'Purchase', 'Adjustment')
  AND COALESCE(BilledCost, 0) >= 0
  AND REGEXP_LIKE(
    LOWER(
      CONCAT_WS(
        ' ',
        CAST(ChargeDescription AS VARCHAR),
        CAST(x_UsageType AS VARCHAR),
        CAST(SkuMeter AS VARCHAR)
      )
    ),
    'spot|preempt|interrupt|evict|reclaim|low[- ]priority'
  )
  AND REGEXP_LIKE(
    LOWER(
      CONCAT_WS(
        ' ',
        CAST(ChargeDescription AS VARCHAR),
        CAST(x_UsageType AS VARCHAR),
        CAST(SkuMeter AS VARCHAR)
      )
    ),
    'restart|recover|relaunch|resum|overhead'
  )
  AND NOT COALESCE(ServiceCategory, '') IN ('Storage', 'Networking', 'Databases')
  AND NOT REGEXP_LIKE(
    LOWER(
      CONCAT_WS(
        ' ',
        CAST(ChargeDescription AS VARCHAR),
        CAST(x_UsageType AS VARCHAR),
        CAST(ServiceName AS VARCHAR)
      )
    ),
    'support|storage|snapshot|backup|data transfer|egress|bandwidth|-bytes|requests-tier'
  )
