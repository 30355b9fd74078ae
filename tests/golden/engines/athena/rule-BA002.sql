SELECT
  x_LineItemId,
  CONCAT(
    CAST('on-demand GPU compute: ' AS VARCHAR),
    CAST(COALESCE(x_UsageType, ChargeDescription) AS VARCHAR)
  ) AS reason
FROM line_items
WHERE
  ChargeCategory = 'Usage'
  AND COALESCE(PricingCategory, 'Standard') = 'Standard'
  AND NOT LOWER(COALESCE(x_PricingModel, 'ondemand')) IN ('spot', 'preemptible', 'low priority', 'reservation', 'savingsplan')
  AND NOT REGEXP_LIKE(
    LOWER(
      CONCAT_WS(
        ' ',
        CAST(x_UsageType AS VARCHAR),
        CAST(ChargeDescription AS VARCHAR),
        CAST(SkuMeter AS VARCHAR)
      )
    ),
    'spot|preemptible|low priority|commitment|restart|recovery|overhead|local storage|\bssd\b|\bdisk\b|\bstorage\b'
  )
  AND (
    REGEXP_LIKE(
      LOWER(COALESCE(x_UsageType, '')),
      '(boxusage|dedicatedusage|hostusage):(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6|p6e|g3|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|trn1|trn1n|trn2|inf1|inf2|dl1|dl2q)\.'
    )
    OR (
      x_Provider = 'azure'
      AND REGEXP_LIKE(
        LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(SkuMeter AS VARCHAR))),
        '^virtual machines.*\b(nc|nd|nv|ng)[0-9]+'
      )
    )
    OR (
      x_Provider = 'gcp'
      AND REGEXP_LIKE(
        LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(ChargeDescription AS VARCHAR))),
        '\b(gpu|nvidia|tesla|a100|h100|h200|b200|l4|t4|v100|p100|tpu)\b'
      )
    )
  )
