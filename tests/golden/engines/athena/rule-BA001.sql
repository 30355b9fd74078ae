SELECT
  x_LineItemId,
  CONCAT(
    CAST('spot GPU compute: ' AS VARCHAR),
    CAST(COALESCE(x_UsageType, ChargeDescription) AS VARCHAR)
  ) AS reason
FROM line_items
WHERE
  ChargeCategory = 'Usage'
  AND (
    PricingCategory = 'Dynamic'
    OR LOWER(COALESCE(x_PricingModel, '')) IN ('spot', 'preemptible', 'low priority')
    OR REGEXP_LIKE(
      LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(ChargeDescription AS VARCHAR))),
      'spotusage|spot preemptible|preemptible|\bspot\b'
    )
  )
  AND (
    REGEXP_LIKE(
      LOWER(COALESCE(x_UsageType, '')),
      'spotusage:(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6|p6e|g3|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|trn1|trn1n|trn2|inf1|inf2|dl1|dl2q)\.'
    )
    OR (
      x_Provider = 'azure'
      AND REGEXP_LIKE(
        LOWER(
          CONCAT_WS(
            ' ',
            CAST(x_UsageType AS VARCHAR),
            CAST(SkuMeter AS VARCHAR),
            CAST(ChargeDescription AS VARCHAR)
          )
        ),
        '\b(nc|nd|nv|ng)[0-9]+[a-z_ ]*'
      )
    )
    OR (
      x_Provider = 'gcp'
      AND REGEXP_LIKE(
        LOWER(CONCAT_WS(' ', CAST(x_UsageType AS VARCHAR), CAST(ChargeDescription AS VARCHAR))),
        '\b(gpu|nvidia|tesla|a100|h100|h200|b200|l4|t4|v100|p100|p4|tpu|a2|a3|a4|g2)\b'
      )
    )
  )
  AND NOT REGEXP_LIKE(
    LOWER(
      CONCAT_WS(
        ' ',
        CAST(x_UsageType AS VARCHAR),
        CAST(ChargeDescription AS VARCHAR),
        CAST(SkuMeter AS VARCHAR)
      )
    ),
    'restart|recovery|relaunch|overhead|local storage|\bssd\b|\bdisk\b|\bstorage\b'
  )
