SELECT
  x_LineItemId,
  CONCAT(
    CAST('Azure Other Compute Charges: ' AS VARCHAR),
    CAST(COALESCE(x_UsageType, ChargeDescription) AS VARCHAR)
  ) AS reason
FROM line_items
WHERE
  x_Provider = 'azure'
  AND REGEXP_LIKE(
    LOWER(
      CONCAT_WS(
        ' ',
        CAST(x_UsageType AS VARCHAR),
        CAST(ChargeDescription AS VARCHAR),
        CAST(SkuMeter AS VARCHAR)
      )
    ),
    'other compute charges?'
  )
