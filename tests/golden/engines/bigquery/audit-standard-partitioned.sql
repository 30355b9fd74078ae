WITH gcp_fields AS (
  SELECT
    CONCAT('gcp-', r.row_hash, '-', CAST(ROW_NUMBER() OVER (PARTITION BY r.row_hash) AS STRING)) AS x_LineItemId,
    r.*
    EXCEPT (row_hash)
  FROM (
    SELECT
      TO_HEX(MD5(TO_JSON_STRING(t))) AS row_hash,
      t.billing_account_id AS billing_account_id,
      t.service.description AS service_description,
      t.sku.id AS sku_id,
      t.sku.description AS sku_description,
      t.project.id AS project_id,
      t.project.name AS project_name,
      t.location.location AS location_location,
      t.location.region AS location_region,
      t.location.zone AS location_zone,
      DATETIME(t.usage_start_time) AS usage_start_time,
      DATETIME(t.usage_end_time) AS usage_end_time,
      DATETIME(t.export_time) AS export_time,
      ROUND(CAST(CAST(t.cost AS STRING) AS BIGNUMERIC), 12) AS cost,
      ROUND(CAST(CAST(t.cost_at_list AS STRING) AS BIGNUMERIC), 12) AS cost_at_list,
      t.currency AS currency,
      t.cost_type AS cost_type,
      t.seller_name AS seller_name,
      ROUND(CAST(CAST(t.usage.amount AS STRING) AS BIGNUMERIC), 12) AS usage_amount,
      t.usage.unit AS usage_unit,
      ROUND(CAST(CAST(t.usage.amount_in_pricing_units AS STRING) AS BIGNUMERIC), 12) AS usage_pricing_amount,
      t.usage.pricing_unit AS usage_pricing_unit,
      TRIM(t.invoice.month) AS invoice_month,
      t.adjustment_info.description AS adjustment_description,
      t.consumption_model.description AS consumption_model_description,
      CAST(NULL AS STRING) AS resource_name,
      CAST(NULL AS STRING) AS resource_global_name,
      CAST(NULL AS BIGNUMERIC) AS price_effective,
      CAST(NULL AS BIGNUMERIC) AS price_list,
      CAST(NULL AS BIGNUMERIC) AS price_unit_quantity,
      ARRAY(
        SELECT AS STRUCT
          CAST(c.amount AS STRING) AS amount,
          c.id AS id,
          c.type AS type
        FROM UNNEST(t.credits) AS c WITH OFFSET AS pos
        ORDER BY
          pos
      ) AS credit_list,
      ARRAY(
        SELECT AS STRUCT
          k,
          v
        FROM (
          SELECT
            0 AS src,
            pos,
            e.key AS k,
            e.value AS v
          FROM UNNEST(t.labels) AS e WITH OFFSET AS pos
          UNION ALL
          SELECT
            1 AS src,
            pos,
            e.key AS k,
            e.value AS v
          FROM UNNEST(t.tags) AS e WITH OFFSET AS pos
          UNION ALL
          SELECT
            2 AS src,
            pos,
            e.key AS k,
            e.value AS v
          FROM UNNEST(t.project.labels) AS e WITH OFFSET AS pos
        )
        ORDER BY
          src,
          pos
      ) AS tag_entries
    FROM `billing-proj.billing_export.gcp_billing_export_v1_01ABCD_23EF45_678901` AS t
    WHERE
      invoice.month = @invoice_month
      AND (
        (
          _PARTITIONTIME >= @partition_start AND _PARTITIONTIME < @partition_end
        )
        OR _PARTITIONTIME IS NULL
      )
  ) AS r
), line_items AS (
  SELECT
    x_LineItemId,
    'gcp' AS x_Provider,
    billing_account_id AS BillingAccountId,
    invoice_start AS BillingPeriodStart,
    invoice_start + INTERVAL '1' MONTH AS BillingPeriodEnd,
    'Google Cloud' AS ProviderName,
    'Google Cloud' AS InvoiceIssuerName,
    COALESCE(NULLIF(seller_name, ''), 'Google Cloud') AS PublisherName,
    project_id AS SubAccountId,
    project_name AS SubAccountName,
    CASE WHEN NOT project_id IS NULL THEN 'Project' END AS SubAccountType,
    usage_start_time AS ChargePeriodStart,
    usage_end_time AS ChargePeriodEnd,
    COALESCE(cost, 0) + credit_total AS BilledCost,
    COALESCE(cost, 0) + credit_total AS EffectiveCost,
    cost AS ContractedCost,
    CASE
      WHEN (
        NOT cost_at_list IS NULL
        AND NOT (
          cost_at_list = 0 AND (
            charge_category = 'Usage' AND COALESCE(cost, 0) <> 0
          )
        )
      )
      THEN cost_at_list
      WHEN (
        charge_category = 'Usage' AND COALESCE(cost, 0) <> 0
      )
      THEN NULL
      ELSE cost
    END AS ListCost,
    CASE
      WHEN (
        NOT cost_at_list IS NULL
        AND NOT (
          cost_at_list = 0 AND (
            charge_category = 'Usage' AND COALESCE(cost, 0) <> 0
          )
        )
      )
      THEN 'cost_at_list'
      WHEN (
        charge_category = 'Usage' AND COALESCE(cost, 0) <> 0
      )
      THEN CASE
        WHEN cost_at_list = 0
        THEN 'missing: cost_at_list = 0'
        ELSE 'missing: cost_at_list empty'
      END
      ELSE 'cost (no cost_at_list in export)'
    END AS x_ListCostSource,
    CASE WHEN COALESCE(price_unit_quantity, 1) = 1 THEN price_list END AS ListUnitPrice,
    CASE WHEN COALESCE(price_unit_quantity, 1) = 1 THEN price_effective END AS ContractedUnitPrice,
    currency AS BillingCurrency,
    currency AS PricingCurrency,
    charge_category AS ChargeCategory,
    CASE WHEN cost_type = 'adjustment' THEN 'Correction' END AS ChargeClass,
    CASE
      WHEN NOT adjustment_description IS NULL AND adjustment_description <> ''
      THEN ARRAY_TO_STRING([sku_description, adjustment_description], ': ')
      ELSE sku_description
    END AS ChargeDescription,
    CASE WHEN is_commitment_fee THEN 'Recurring' ELSE 'Usage-Based' END AS ChargeFrequency,
    CASE
      WHEN NOT charge_category IN ('Usage', 'Purchase')
      THEN NULL
      WHEN is_commitment_fee
      THEN 'Standard'
      WHEN is_spot
      THEN 'Dynamic'
      WHEN is_committed
      THEN 'Committed'
      ELSE 'Standard'
    END AS PricingCategory,
    CASE
      WHEN is_spot
      THEN 'Spot'
      WHEN NOT NULLIF(consumption_model_description, '') IS NULL
      AND consumption_model_description <> 'Default'
      THEN consumption_model_description
      WHEN is_committed OR is_commitment_fee
      THEN 'CUD'
      WHEN cost_type = 'regular'
      THEN 'OnDemand'
    END AS x_PricingModel,
    CASE
      WHEN EXISTS(
        SELECT
          1
        FROM UNNEST(credit_types) AS _col
        WHERE
          _col = 'COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE'
      )
      THEN 'Spend'
      WHEN EXISTS(
        SELECT
          1
        FROM UNNEST(credit_types) AS _col
        WHERE
          _col = 'COMMITTED_USAGE_DISCOUNT'
      )
      THEN 'Usage'
    END AS CommitmentDiscountCategory,
    CASE
      WHEN EXISTS(
        SELECT
          1
        FROM UNNEST(credit_types) AS x
        WHERE
          x IN UNNEST(['COMMITTED_USAGE_DISCOUNT', 'COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE'])
      )
      THEN ARRAY(
        SELECT
          c
        FROM UNNEST(credit_list) AS c WITH OFFSET AS pos
        WHERE
          c.`type` LIKE 'COMMITTED_USAGE_DISCOUNT%'
        ORDER BY
          pos
      )[SAFE_OFFSET(0)].id
    END AS CommitmentDiscountId,
    CASE
      WHEN EXISTS(
        SELECT
          1
        FROM UNNEST(credit_types) AS x
        WHERE
          x IN UNNEST(['COMMITTED_USAGE_DISCOUNT', 'COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE'])
      )
      THEN 'Committed Use Discount'
    END AS CommitmentDiscountType,
    usage_amount AS ConsumedQuantity,
    usage_unit AS ConsumedUnit,
    usage_pricing_amount AS PricingQuantity,
    usage_pricing_unit AS PricingUnit,
    NULLIF(location_region, '') AS RegionId,
    COALESCE(NULLIF(location_region, ''), NULLIF(location_location, '')) AS RegionName,
    NULLIF(location_zone, '') AS AvailabilityZone,
    NULLIF(resource_global_name, '') AS ResourceId,
    NULLIF(resource_name, '') AS ResourceName,
    CASE REGEXP_EXTRACT(COALESCE(resource_global_name, ''), '/([A-Za-z]+)/[^/]+$')
      WHEN 'instances'
      THEN 'Instance'
      WHEN 'buckets'
      THEN 'Bucket'
      WHEN 'disks'
      THEN 'Disk'
      WHEN 'nodes'
      THEN 'TPU Node'
      WHEN 'queuedResources'
      THEN 'TPU Queued Resource'
      WHEN 'clusters'
      THEN 'Cluster'
      WHEN ''
      THEN NULL
      ELSE REGEXP_EXTRACT(resource_global_name, '/([A-Za-z]+)/[^/]+$')
    END AS ResourceType,
    service_description AS ServiceName,
    CASE
      WHEN cost_type IN ('tax', 'rounding_error')
      THEN 'Other'
      WHEN REGEXP_CONTAINS(
        COALESCE(sku_description, ''),
        '(?i)Data Transfer|Egress|Network .* Out|Load Balanc'
      )
      OR service_description IN ('Networking', 'Cloud CDN', 'Cloud DNS', 'Cloud NAT', 'Cloud Interconnect')
      THEN 'Networking'
      WHEN service_description IN ('Cloud Storage', 'Filestore', 'Cloud Storage for Firebase')
      OR (
        service_description = 'Compute Engine'
        AND REGEXP_CONTAINS(
          COALESCE(sku_description, ''),
          '(?i)PD Capacity|Storage PD|Snapshot|Local Storage|Hyperdisk'
        )
      )
      THEN 'Storage'
      WHEN service_description IN (
        'Compute Engine',
        'Kubernetes Engine',
        'Cloud TPU',
        'Cloud Run',
        'Cloud Functions',
        'App Engine',
        'Batch',
        'Cloud Batch'
      )
      THEN 'Compute'
      WHEN service_description IN ('Vertex AI', 'Cloud Machine Learning Engine', 'AI Platform', 'Gemini API')
      THEN 'AI and Machine Learning'
      WHEN service_description IN ('BigQuery', 'Dataflow', 'Dataproc', 'Pub/Sub', 'Looker')
      THEN 'Analytics'
      WHEN service_description IN (
        'Cloud SQL',
        'Cloud Spanner',
        'Cloud Bigtable',
        'Cloud Firestore',
        'AlloyDB',
        'Cloud Memorystore for Redis'
      )
      THEN 'Databases'
      WHEN service_description IN (
        'Cloud Logging',
        'Cloud Monitoring',
        'Stackdriver Logging',
        'Stackdriver Monitoring'
      )
      THEN 'Management and Governance'
      ELSE 'Other'
    END AS ServiceCategory,
    sku_id AS SkuId,
    sku_description AS x_UsageType,
    service_description AS x_Operation,
    cost_type AS x_LineItemType,
    export_time AS x_ExportTime,
    ARRAY(
      SELECT AS STRUCT
        key,
        ARRAY_AGG(value ORDER BY pos
        LIMIT 1)[OFFSET(0)] AS value
      FROM (
        SELECT
          LOWER(TRIM(e.k, ' \t\n\r\v\f')) AS key,
          TRIM(e.v, ' \t\n\r\v\f') AS value,
          pos
        FROM UNNEST(tag_entries) AS e WITH OFFSET AS pos
      )
      WHERE
        NOT key IS NULL AND key <> '' AND NOT value IS NULL AND value <> ''
      GROUP BY
        key
      ORDER BY
        key
    ) AS Tags,
    CAST(NULL AS STRING) AS BillingAccountName,
    CAST(NULL AS STRING) AS BillingAccountType,
    CAST(NULL AS STRING) AS CapacityReservationId,
    CAST(NULL AS STRING) AS CapacityReservationStatus,
    CAST(NULL AS STRING) AS CommitmentDiscountName,
    CAST(NULL AS BIGNUMERIC) AS CommitmentDiscountQuantity,
    CAST(NULL AS STRING) AS CommitmentDiscountStatus,
    CAST(NULL AS STRING) AS CommitmentDiscountUnit,
    CAST(NULL AS STRING) AS InvoiceId,
    CAST(NULL AS STRING) AS ServiceSubcategory,
    CAST(NULL AS STRING) AS SkuMeter,
    CAST(NULL AS STRING) AS SkuPriceDetails,
    CAST(NULL AS STRING) AS SkuPriceId,
    CAST(NULL AS STRING) AS x_SplitParentId,
    CAST(NULL AS BIGNUMERIC) AS x_SplitCost
  FROM (
    SELECT
      *,
      CASE
        WHEN cost_type = 'tax'
        THEN 'Tax'
        WHEN cost_type IN ('adjustment', 'rounding_error')
        THEN 'Adjustment'
        WHEN COALESCE(cost, 0) = 0 AND credit_total <> 0
        THEN 'Credit'
        WHEN is_commitment_fee
        THEN 'Purchase'
        WHEN cost_type = 'regular' OR cost_type IS NULL
        THEN 'Usage'
        ELSE 'Adjustment'
      END AS charge_category
    FROM (
      SELECT
        *,
        COALESCE(
          (
            SELECT
              SUM(ROUND(CAST(NULLIF(TRIM(CAST(c.amount AS STRING)), '') AS BIGNUMERIC), 12))
            FROM UNNEST(credit_list) AS c
          ),
          0
        ) AS credit_total,
        ARRAY(
          SELECT
            c.`type`
          FROM UNNEST(credit_list) AS c WITH OFFSET AS pos
          ORDER BY
            pos
        ) AS credit_types,
        REGEXP_CONTAINS(COALESCE(sku_description, ''), '(?i)\\b(spot|preemptible)\\b')
        OR LOWER(COALESCE(consumption_model_description, '')) LIKE LOWER('%spot%') AS is_spot,
        EXISTS(
          SELECT
            1
          FROM UNNEST(credit_list) AS c
          WHERE
            c.`type` IN UNNEST(['COMMITTED_USAGE_DISCOUNT', 'COMMITTED_USAGE_DISCOUNT_DOLLAR_BASE'])
        )
        OR LOWER(COALESCE(consumption_model_description, '')) LIKE LOWER('%commit%')
        OR LOWER(COALESCE(consumption_model_description, '')) LIKE LOWER('%CUD%') AS is_committed,
        LOWER(COALESCE(sku_description, '')) LIKE LOWER('Commitment%') AS is_commitment_fee,
        SAFE.PARSE_DATETIME('%Y%m', invoice_month) AS invoice_start
      FROM (
        SELECT
          *
        FROM gcp_fields
      ) AS f
    ) AS d
  ) AS c
), checkpoint_resources AS (
  SELECT DISTINCT
    x_Provider,
    ResourceId
  FROM line_items
  WHERE
    NOT ResourceId IS NULL
    AND (
      (
        LOWER(
          (
            SELECT
              tg.value
            FROM UNNEST(Tags) AS tg
            WHERE
              tg.key = 'purpose'
            LIMIT 1
          )
        ) IN ('checkpoint', 'checkpoints', 'ckpt')
      )
      OR (
        LOWER(
          (
            SELECT
              tg.value
            FROM UNNEST(Tags) AS tg
            WHERE
              tg.key = 'role'
            LIMIT 1
          )
        ) IN ('checkpoint', 'checkpoints', 'ckpt')
      )
      OR (
        LOWER(ResourceId) LIKE '%checkpoint%'
        OR LOWER(COALESCE(ResourceName, '')) LIKE '%checkpoint%'
      )
      OR (
        LOWER(ResourceId) LIKE '%ckpt%'
        OR LOWER(COALESCE(ResourceName, '')) LIKE '%ckpt%'
      )
    )
), hits AS (
  SELECT DISTINCT
    CAST(x_LineItemId AS STRING) AS x_LineItemId,
    'BA001' AS rule_id,
    'spot_compute' AS category
  FROM (
    SELECT
      x_LineItemId,
      'spot GPU compute: ' || COALESCE(x_UsageType, ChargeDescription) AS reason
    FROM line_items
    WHERE
      ChargeCategory = 'Usage'
      AND (
        PricingCategory = 'Dynamic'
        OR LOWER(COALESCE(x_PricingModel, '')) IN ('spot', 'preemptible', 'low priority')
        OR REGEXP_CONTAINS(
          LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription], ' ')),
          'spotusage|spot preemptible|preemptible|\\bspot\\b'
        )
      )
      AND (
        REGEXP_CONTAINS(
          LOWER(COALESCE(x_UsageType, '')),
          'spotusage:(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6|p6e|g3|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|trn1|trn1n|trn2|inf1|inf2|dl1|dl2q)\\.'
        )
        OR (
          x_Provider = 'azure'
          AND REGEXP_CONTAINS(
            LOWER(ARRAY_TO_STRING([x_UsageType, SkuMeter, ChargeDescription], ' ')),
            '\\b(nc|nd|nv|ng)[0-9]+[a-z_ ]*'
          )
        )
        OR (
          x_Provider = 'gcp'
          AND REGEXP_CONTAINS(
            LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription], ' ')),
            '\\b(gpu|nvidia|tesla|a100|h100|h200|b200|l4|t4|v100|p100|p4|tpu|a2|a3|a4|g2)\\b'
          )
        )
      )
      AND NOT REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription, SkuMeter], ' ')),
        'restart|recovery|relaunch|overhead|local storage|\\bssd\\b|\\bdisk\\b|\\bstorage\\b'
      )
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS STRING) AS x_LineItemId,
    'BA002' AS rule_id,
    'on_demand_compute' AS category
  FROM (
    SELECT
      x_LineItemId,
      'on-demand GPU compute: ' || COALESCE(x_UsageType, ChargeDescription) AS reason
    FROM line_items
    WHERE
      ChargeCategory = 'Usage'
      AND COALESCE(PricingCategory, 'Standard') = 'Standard'
      AND NOT LOWER(COALESCE(x_PricingModel, 'ondemand')) IN ('spot', 'preemptible', 'low priority', 'reservation', 'savingsplan')
      AND NOT REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription, SkuMeter], ' ')),
        'spot|preemptible|low priority|commitment|restart|recovery|overhead|local storage|\\bssd\\b|\\bdisk\\b|\\bstorage\\b'
      )
      AND (
        REGEXP_CONTAINS(
          LOWER(COALESCE(x_UsageType, '')),
          '(boxusage|dedicatedusage|hostusage):(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6|p6e|g3|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|trn1|trn1n|trn2|inf1|inf2|dl1|dl2q)\\.'
        )
        OR (
          x_Provider = 'azure'
          AND REGEXP_CONTAINS(
            LOWER(ARRAY_TO_STRING([x_UsageType, SkuMeter], ' ')),
            '^virtual machines.*\\b(nc|nd|nv|ng)[0-9]+'
          )
        )
        OR (
          x_Provider = 'gcp'
          AND REGEXP_CONTAINS(
            LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription], ' ')),
            '\\b(gpu|nvidia|tesla|a100|h100|h200|b200|l4|t4|v100|p100|tpu)\\b'
          )
        )
      )
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS STRING) AS x_LineItemId,
    'BA010' AS rule_id,
    'restart_fee' AS category
  FROM (
    SELECT
      x_LineItemId,
      'restart fee: ' || COALESCE(ChargeDescription, x_UsageType) || ' (' || COALESCE(CAST(ConsumedQuantity AS STRING), '?') || ' ' || COALESCE(ConsumedUnit, 'units') || ')' AS reason
    FROM line_items
    WHERE
      ChargeCategory IN ('Usage', 'Purchase', 'Adjustment')
      AND COALESCE(BilledCost, 0) >= 0
      AND REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([ChargeDescription, x_UsageType, SkuMeter], ' ')),
        'spot|preempt|interrupt|evict|reclaim|low[- ]priority'
      )
      AND REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([ChargeDescription, x_UsageType, SkuMeter], ' ')),
        'restart|recover|relaunch|resum|overhead'
      )
      AND NOT COALESCE(ServiceCategory, '') IN ('Storage', 'Networking', 'Databases')
      AND NOT REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([ChargeDescription, x_UsageType, ServiceName], ' ')),
        'support|storage|snapshot|backup|data transfer|egress|bandwidth|-bytes|requests-tier'
      )
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS STRING) AS x_LineItemId,
    'BA020' AS rule_id,
    'other_compute_charge' AS category
  FROM (
    SELECT
      x_LineItemId,
      'Azure Other Compute Charges: ' || COALESCE(x_UsageType, ChargeDescription) AS reason
    FROM line_items
    WHERE
      x_Provider = 'azure'
      AND REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription, SkuMeter], ' ')),
        'other compute charges?'
      )
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS STRING) AS x_LineItemId,
    'BA030' AS rule_id,
    'storage_reread' AS category
  FROM (
    SELECT
      x_LineItemId,
      'checkpoint re-read: ' || COALESCE(x_UsageType, ChargeDescription) || ' on ' || COALESCE(ResourceName, ResourceId, SubAccountId, '?') AS reason
    FROM line_items
    WHERE
      ChargeCategory = 'Usage'
      AND (
        REGEXP_CONTAINS(
          LOWER(COALESCE(x_UsageType, '')),
          'requests-tier2|requests-gda-tier2|retrieval-|-bytes-retrieved|requests-int-tier2'
        )
        OR REGEXP_CONTAINS(
          LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription], ' ')),
          'read operations|all other operations|data retrieval|class b operations|retrieval|(^|\\|)read$'
        )
      )
      AND NOT REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription], ' ')),
        'requests-tier1|write operations|class a operations|list operations'
      )
      AND (
        ResourceId IN (
          SELECT
            ResourceId
          FROM checkpoint_resources
        )
        OR EXISTS(
          SELECT
            1
          FROM UNNEST(['purpose', 'role']) AS k
          WHERE
            LOWER(
              (
                SELECT
                  tg.value
                FROM UNNEST(Tags) AS tg
                WHERE
                  tg.key = k
                LIMIT 1
              )
            ) IN UNNEST(['checkpoint', 'checkpoints', 'ckpt'])
        )
      )
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS STRING) AS x_LineItemId,
    'BA040' AS rule_id,
    'checkpoint_egress' AS category
  FROM (
    SELECT
      x_LineItemId,
      'checkpoint egress: ' || COALESCE(x_UsageType, ChargeDescription) || ' from ' || COALESCE(ResourceName, ResourceId, SubAccountId, '?') AS reason
    FROM line_items
    WHERE
      ChargeCategory = 'Usage'
      AND (
        REGEXP_CONTAINS(
          LOWER(COALESCE(x_UsageType, '')),
          'out-bytes|datatransfer-regional-bytes|datatransfer-xaz'
        )
        OR REGEXP_CONTAINS(
          LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription], ' ')),
          '^bandwidth\\||data transfer out|inter[- ]region|intra continent|egress|network .* out\\b'
        )
      )
      AND NOT REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([x_UsageType, ChargeDescription], ' ')),
        'in-bytes|data transfer in\\b|ingress'
      )
      AND (
        ResourceId IN (
          SELECT
            ResourceId
          FROM checkpoint_resources
        )
        OR EXISTS(
          SELECT
            1
          FROM UNNEST(['purpose', 'role']) AS k
          WHERE
            LOWER(
              (
                SELECT
                  tg.value
                FROM UNNEST(Tags) AS tg
                WHERE
                  tg.key = k
                LIMIT 1
              )
            ) IN UNNEST(['checkpoint', 'checkpoints', 'ckpt'])
        )
      )
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS STRING) AS x_LineItemId,
    'BA050' AS rule_id,
    'interruption_signal' AS category
  FROM (
    SELECT
      x_LineItemId,
      'interruption signal: ' || COALESCE(ChargeDescription, x_UsageType) AS reason
    FROM line_items
    WHERE
      REGEXP_CONTAINS(
        LOWER(ARRAY_TO_STRING([ChargeDescription, x_UsageType, SkuMeter], ' ')),
        '\\b(interrupted|interruptions?|evicted|evictions?|preempted|preemptions?|reclaimed|reclamations?)\\b'
      )
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
), ranks AS (
  SELECT
    x_LineItemId,
    MIN(
      CASE category
        WHEN 'restart_fee'
        THEN 1
        WHEN 'other_compute_charge'
        THEN 2
        WHEN 'storage_reread'
        THEN 3
        WHEN 'checkpoint_egress'
        THEN 4
        WHEN 'interruption_signal'
        THEN 5
        WHEN 'spot_compute'
        THEN 6
        WHEN 'on_demand_compute'
        THEN 7
        WHEN 'custom'
        THEN 8
      END
    ) AS rank,
    MAX(CASE WHEN category = 'interruption_signal' THEN 1 ELSE 0 END) = 1 AS signal
  FROM hits
  GROUP BY
    x_LineItemId
), g0 AS (
  SELECT
    l.x_Provider AS provider,
    COALESCE(l.BillingCurrency, '?') AS currency,
    l.ResourceId AS ResourceId,
    l.ResourceName AS ResourceName,
    l.SubAccountId AS SubAccountId,
    l.BillingAccountId AS BillingAccountId,
    LOWER(
      COALESCE(
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/training-job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/training_job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job-id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job_id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training-job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training_job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job-id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job_id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training.kubeflow.org/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training_kubeflow_org_job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/training.kubeflow.org/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'ray.io/cluster'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'ray_io_cluster'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/ray.io/cluster'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'volcano.sh/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'volcano_sh_job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/volcano.sh/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'jobset.sigs.k8s.io/jobset-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'jobset_sigs_k8s_io_jobset_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/jobset.sigs.k8s.io/jobset-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'batch.kubernetes.io/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'batch_kubernetes_io_job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/batch.kubernetes.io/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job-name'
              LIMIT 1
            )
          ),
          ''
        )
      )
    ) AS tag_job,
    LOWER(
      COALESCE(
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/team'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/cost-center'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/costcenter'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/owner'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'team'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'cost-center'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'costcenter'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'owner'
              LIMIT 1
            )
          ),
          ''
        ),
        CASE
          WHEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws_eks_namespace'
                LIMIT 1
              )
            ),
            ''
          ) NOT LIKE 'kube:%'
          THEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws_eks_namespace'
                LIMIT 1
              )
            ),
            ''
          )
        END,
        CASE
          WHEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws:eks:namespace'
                LIMIT 1
              )
            ),
            ''
          ) NOT LIKE 'kube:%'
          THEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws:eks:namespace'
                LIMIT 1
              )
            ),
            ''
          )
        END,
        CASE
          WHEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'k8s-namespace'
                LIMIT 1
              )
            ),
            ''
          ) NOT LIKE 'kube:%'
          THEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'k8s-namespace'
                LIMIT 1
              )
            ),
            ''
          )
        END
      )
    ) AS tag_team,
    l.BillingPeriodStart AS bps,
    CAST(l.ChargePeriodStart AS DATE) AS day,
    c.rank AS rank,
    COALESCE(c.signal, FALSE) AS signal,
    CASE
      WHEN (
        c.rank = 6 OR c.rank IN (1, 3, 4) OR COALESCE(c.signal, FALSE)
      )
      THEN l.ChargePeriodStart
    END AS cps,
    CASE
      WHEN (
        c.rank = 6 OR c.rank IN (1, 3, 4) OR COALESCE(c.signal, FALSE)
      )
      THEN l.ChargePeriodEnd
    END AS cpe,
    COUNT(*) AS n,
    SUM(COALESCE(l.EffectiveCost, 0)) AS effective,
    SUM(COALESCE(l.ListCost, 0)) AS list,
    SUM(
      CASE
        WHEN c.rank = 1
        THEN CASE
          WHEN REGEXP_CONTAINS(
            LOWER(COALESCE(l.ConsumedUnit, '')),
            'restart|interrupt|eviction|preemption|count|each|event|occurrence|^1$|^$'
          )
          THEN COALESCE(l.ConsumedQuantity, 1)
          ELSE 1
        END
      END
    ) AS fee_n,
    MAX(
      CAST(CASE
        WHEN c.rank = 6 AND NOT l.ChargePeriodStart IS NULL AND NOT l.ChargePeriodEnd IS NULL
        THEN LEAST(
          DATETIME_DIFF(l.ChargePeriodEnd, l.ChargePeriodStart, SECOND) / 3600.0,
          CASE
            WHEN LOWER(TRIM(COALESCE(l.PricingUnit, ''))) IN ('h', 'hr', 'hrs', 'hour', 'hours', '1 h', '1 hr', '1 hrs', '1 hour', '1 hours')
            THEN CAST(l.PricingQuantity AS FLOAT64)
            WHEN LOWER(TRIM(COALESCE(l.PricingUnit, ''))) IN ('10 hr', '10 hrs', '10 hour', '10 hours')
            THEN CAST(l.PricingQuantity AS FLOAT64) * 10
            WHEN LOWER(TRIM(COALESCE(l.PricingUnit, ''))) IN ('100 hr', '100 hrs', '100 hour', '100 hours')
            THEN CAST(l.PricingQuantity AS FLOAT64) * 100
            WHEN LOWER(TRIM(COALESCE(l.ConsumedUnit, ''))) IN ('h', 'hr', 'hrs', 'hour', 'hours', '1 h', '1 hr', '1 hrs', '1 hour', '1 hours')
            THEN CAST(l.ConsumedQuantity AS FLOAT64)
            WHEN LOWER(TRIM(COALESCE(l.ConsumedUnit, ''))) IN ('10 hr', '10 hrs', '10 hour', '10 hours')
            THEN CAST(l.ConsumedQuantity AS FLOAT64) * 10
            WHEN LOWER(TRIM(COALESCE(l.ConsumedUnit, ''))) IN ('100 hr', '100 hrs', '100 hour', '100 hours')
            THEN CAST(l.ConsumedQuantity AS FLOAT64) * 100
            ELSE DATETIME_DIFF(l.ChargePeriodEnd, l.ChargePeriodStart, SECOND) / 3600.0
          END
        )
      END AS BIGNUMERIC)
    ) AS hours,
    SUM(
      CASE
        WHEN c.rank = 6
        THEN CAST(CASE
          WHEN (
            CASE l.x_Provider
              WHEN 'aws'
              THEN (
                CASE
                  WHEN l.ListCost > 0
                  AND l.x_ListCostSource IN ('pricing_public_on_demand_cost', 'ListCost')
                  THEN l.ListCost
                END
              )
              WHEN 'azure'
              THEN (
                CAST(NULL AS BIGNUMERIC)
              )
              WHEN 'gcp'
              THEN (
                NULL
              )
              ELSE CASE WHEN l.ListCost > l.EffectiveCost THEN l.ListCost END
            END
          ) > 0
          THEN (
            CASE l.x_Provider
              WHEN 'aws'
              THEN (
                CASE
                  WHEN l.ListCost > 0
                  AND l.x_ListCostSource IN ('pricing_public_on_demand_cost', 'ListCost')
                  THEN l.ListCost
                END
              )
              WHEN 'azure'
              THEN (
                CAST(NULL AS BIGNUMERIC)
              )
              WHEN 'gcp'
              THEN (
                NULL
              )
              ELSE CASE WHEN l.ListCost > l.EffectiveCost THEN l.ListCost END
            END
          )
        END AS BIGNUMERIC)
      END
    ) AS od,
    SUM(
      CASE
        WHEN c.rank = 6
        AND NOT (
          CASE
            WHEN (
              CASE l.x_Provider
                WHEN 'aws'
                THEN (
                  CASE
                    WHEN l.ListCost > 0
                    AND l.x_ListCostSource IN ('pricing_public_on_demand_cost', 'ListCost')
                    THEN l.ListCost
                  END
                )
                WHEN 'azure'
                THEN (
                  CAST(NULL AS BIGNUMERIC)
                )
                WHEN 'gcp'
                THEN (
                  NULL
                )
                ELSE CASE WHEN l.ListCost > l.EffectiveCost THEN l.ListCost END
              END
            ) > 0
            THEN (
              CASE l.x_Provider
                WHEN 'aws'
                THEN (
                  CASE
                    WHEN l.ListCost > 0
                    AND l.x_ListCostSource IN ('pricing_public_on_demand_cost', 'ListCost')
                    THEN l.ListCost
                  END
                )
                WHEN 'azure'
                THEN (
                  CAST(NULL AS BIGNUMERIC)
                )
                WHEN 'gcp'
                THEN (
                  NULL
                )
                ELSE CASE WHEN l.ListCost > l.EffectiveCost THEN l.ListCost END
              END
            )
          END
        ) IS NULL
        THEN 1
        ELSE 0
      END
    ) AS priced_effective,
    SUM(
      CASE
        WHEN c.rank = 6
        AND (
          CASE
            WHEN (
              CASE l.x_Provider
                WHEN 'aws'
                THEN (
                  CASE
                    WHEN l.ListCost > 0
                    AND l.x_ListCostSource IN ('pricing_public_on_demand_cost', 'ListCost')
                    THEN l.ListCost
                  END
                )
                WHEN 'azure'
                THEN (
                  CAST(NULL AS BIGNUMERIC)
                )
                WHEN 'gcp'
                THEN (
                  NULL
                )
                ELSE CASE WHEN l.ListCost > l.EffectiveCost THEN l.ListCost END
              END
            ) > 0
            THEN (
              CASE l.x_Provider
                WHEN 'aws'
                THEN (
                  CASE
                    WHEN l.ListCost > 0
                    AND l.x_ListCostSource IN ('pricing_public_on_demand_cost', 'ListCost')
                    THEN l.ListCost
                  END
                )
                WHEN 'azure'
                THEN (
                  CAST(NULL AS BIGNUMERIC)
                )
                WHEN 'gcp'
                THEN (
                  NULL
                )
                ELSE CASE WHEN l.ListCost > l.EffectiveCost THEN l.ListCost END
              END
            )
          END
        ) IS NULL
        THEN COALESCE(l.EffectiveCost, 0)
        ELSE 0
      END
    ) AS unpriced_effective
  FROM line_items AS l
  LEFT JOIN ranks AS c
    ON c.x_LineItemId = l.x_LineItemId
  WHERE
    l.BillingPeriodStart >= CAST('2026-09-17 00:00:00' AS DATETIME)
    AND l.BillingPeriodStart < CAST('2026-10-18 00:00:00' AS DATETIME)
  GROUP BY
    l.x_Provider,
    COALESCE(l.BillingCurrency, '?'),
    l.ResourceId,
    l.ResourceName,
    l.SubAccountId,
    l.BillingAccountId,
    LOWER(
      COALESCE(
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/training-job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/training_job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job-id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job_id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training-job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training_job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job-id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job_id'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training.kubeflow.org/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'training_kubeflow_org_job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/training.kubeflow.org/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'ray.io/cluster'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'ray_io_cluster'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/ray.io/cluster'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'volcano.sh/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'volcano_sh_job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/volcano.sh/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'jobset.sigs.k8s.io/jobset-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'jobset_sigs_k8s_io_jobset_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/jobset.sigs.k8s.io/jobset-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'batch.kubernetes.io/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'batch_kubernetes_io_job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/batch.kubernetes.io/job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job-name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'job_name'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/job-name'
              LIMIT 1
            )
          ),
          ''
        )
      )
    ),
    LOWER(
      COALESCE(
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/team'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/cost-center'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/costcenter'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'k8s-label/owner'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'team'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'cost-center'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'costcenter'
              LIMIT 1
            )
          ),
          ''
        ),
        NULLIF(
          TRIM(
            (
              SELECT
                tg.value
              FROM UNNEST(l.Tags) AS tg
              WHERE
                tg.key = 'owner'
              LIMIT 1
            )
          ),
          ''
        ),
        CASE
          WHEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws_eks_namespace'
                LIMIT 1
              )
            ),
            ''
          ) NOT LIKE 'kube:%'
          THEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws_eks_namespace'
                LIMIT 1
              )
            ),
            ''
          )
        END,
        CASE
          WHEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws:eks:namespace'
                LIMIT 1
              )
            ),
            ''
          ) NOT LIKE 'kube:%'
          THEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'aws:eks:namespace'
                LIMIT 1
              )
            ),
            ''
          )
        END,
        CASE
          WHEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'k8s-namespace'
                LIMIT 1
              )
            ),
            ''
          ) NOT LIKE 'kube:%'
          THEN NULLIF(
            TRIM(
              (
                SELECT
                  tg.value
                FROM UNNEST(l.Tags) AS tg
                WHERE
                  tg.key = 'k8s-namespace'
                LIMIT 1
              )
            ),
            ''
          )
        END
      )
    ),
    l.BillingPeriodStart,
    CAST(l.ChargePeriodStart AS DATE),
    c.rank,
    COALESCE(c.signal, FALSE),
    CASE
      WHEN (
        c.rank = 6 OR c.rank IN (1, 3, 4) OR COALESCE(c.signal, FALSE)
      )
      THEN l.ChargePeriodStart
    END,
    CASE
      WHEN (
        c.rank = 6 OR c.rank IN (1, 3, 4) OR COALESCE(c.signal, FALSE)
      )
      THEN l.ChargePeriodEnd
    END
), line_group_keys AS (
  SELECT
    ROW_NUMBER() OVER (
      ORDER BY provider NULLS LAST, currency NULLS LAST, ResourceId NULLS LAST, ResourceName NULLS LAST, SubAccountId NULLS LAST, BillingAccountId NULLS LAST, tag_job NULLS LAST, tag_team NULLS LAST
    ) AS h,
    provider,
    currency,
    ResourceId,
    ResourceName,
    SubAccountId,
    BillingAccountId,
    tag_job,
    tag_team
  FROM (
    SELECT DISTINCT
      provider,
      currency,
      ResourceId,
      ResourceName,
      SubAccountId,
      BillingAccountId,
      tag_job,
      tag_team
    FROM g0
  ) AS d
), line_groups AS (
  SELECT
    k.h AS h,
    g0.bps AS bps,
    g0.day AS day,
    g0.rank AS rank,
    g0.signal AS signal,
    g0.cps AS cps,
    g0.cpe AS cpe,
    g0.n AS n,
    g0.effective AS effective,
    g0.list AS list,
    g0.fee_n AS fee_n,
    g0.hours AS hours,
    g0.od AS od,
    g0.priced_effective AS priced_effective,
    g0.unpriced_effective AS unpriced_effective
  FROM g0
  JOIN line_group_keys AS k
    ON k.provider IS NOT DISTINCT FROM g0.provider
    AND k.currency IS NOT DISTINCT FROM g0.currency
    AND k.ResourceId IS NOT DISTINCT FROM g0.ResourceId
    AND k.ResourceName IS NOT DISTINCT FROM g0.ResourceName
    AND k.SubAccountId IS NOT DISTINCT FROM g0.SubAccountId
    AND k.BillingAccountId IS NOT DISTINCT FROM g0.BillingAccountId
    AND k.tag_job IS NOT DISTINCT FROM g0.tag_job
    AND k.tag_team IS NOT DISTINCT FROM g0.tag_team
), keyed AS (
  SELECT
    k.h,
    k.provider,
    k.currency,
    k.ResourceId,
    k.ResourceName,
    k.SubAccountId,
    k.BillingAccountId,
    k.tag_job AS tag_job,
    k.tag_team AS tag_team,
    p.n,
    FALSE AS pod
  FROM line_group_keys AS k
  JOIN (
    SELECT
      g.h,
      SUM(g.n) AS n
    FROM line_groups AS g
    WHERE
      g.bps >= CAST('2026-09-17 00:00:00' AS DATETIME)
      AND g.bps < CAST('2026-10-18 00:00:00' AS DATETIME)
    GROUP BY
      g.h
  ) AS p
    ON p.h = k.h
), res_job AS (
  SELECT
    provider,
    ResourceId,
    tag_job
  FROM (
    SELECT
      provider,
      ResourceId,
      tag_job,
      ROW_NUMBER() OVER (PARTITION BY provider, ResourceId ORDER BY SUM(n) DESC, tag_job NULLS LAST) AS rn
    FROM (
      SELECT
        *
      FROM keyed
      WHERE
        NOT pod
    ) AS kn
    WHERE
      NOT tag_job IS NULL
    GROUP BY
      provider,
      ResourceId,
      tag_job
  ) AS t
  WHERE
    rn = 1
), res_team AS (
  SELECT
    provider,
    ResourceId,
    tag_team
  FROM (
    SELECT
      provider,
      ResourceId,
      tag_team,
      ROW_NUMBER() OVER (PARTITION BY provider, ResourceId ORDER BY SUM(n) DESC, tag_team NULLS LAST) AS rn
    FROM (
      SELECT
        *
      FROM keyed
      WHERE
        NOT pod
    ) AS kn
    WHERE
      NOT tag_team IS NULL
    GROUP BY
      provider,
      ResourceId,
      tag_team
  ) AS t
  WHERE
    rn = 1
), lined AS (
  SELECT
    k.h,
    k.n,
    COALESCE(k.tag_job, rj.tag_job, CAST(NULL AS STRING)) AS line_job,
    COALESCE(
      k.tag_team,
      rt.tag_team,
      CAST(NULL AS STRING),
      CAST(NULL AS STRING),
      CAST(NULL AS STRING)
    ) AS line_team
  FROM keyed AS k
  LEFT JOIN res_job AS rj
    ON rj.provider = k.provider AND rj.ResourceId = k.ResourceId
  LEFT JOIN res_team AS rt
    ON rt.provider = k.provider AND rt.ResourceId = k.ResourceId
), job_team AS (
  SELECT
    line_job,
    line_team
  FROM (
    SELECT
      line_job,
      line_team,
      ROW_NUMBER() OVER (PARTITION BY line_job ORDER BY SUM(n) DESC, line_team NULLS LAST) AS rn
    FROM (
      SELECT
        *
      FROM lined
      WHERE
        NOT line_job IS NULL
    ) AS lj
    WHERE
      NOT line_team IS NULL
    GROUP BY
      line_job,
      line_team
  ) AS t
  WHERE
    rn = 1
), ba_attr AS (
  SELECT
    k.h,
    COALESCE(k.line_job, '(unattributed)') AS job,
    COALESCE(
      CASE WHEN NOT k.line_job IS NULL THEN jt.line_team END,
      k.line_team,
      '(unattributed)'
    ) AS team
  FROM lined AS k
  LEFT JOIN job_team AS jt
    ON jt.line_job = k.line_job
), ba_agg AS (
  SELECT
    t.job AS job,
    t.team AS team,
    k.provider AS provider,
    k.currency AS currency,
    g.day AS day,
    CASE g.rank
      WHEN 1
      THEN 'restart_fee'
      WHEN 2
      THEN 'other_compute_charge'
      WHEN 3
      THEN 'storage_reread'
      WHEN 4
      THEN 'checkpoint_egress'
      WHEN 5
      THEN 'interruption_signal'
      WHEN 6
      THEN 'spot_compute'
      WHEN 7
      THEN 'on_demand_compute'
      WHEN 8
      THEN 'custom'
    END AS category,
    g.signal AS signal,
    SUM(g.n) AS n,
    SUM(g.effective) AS cost,
    SUM(g.list) AS list_cost,
    SUM(g.fee_n) AS fee_n,
    SUM(g.priced_effective) AS priced,
    SUM(g.unpriced_effective) AS unpriced,
    SUM(g.od) AS od_cost,
    k.BillingAccountId AS account
  FROM line_groups AS g
  JOIN ba_attr AS t
    ON t.h = g.h
  JOIN line_group_keys AS k
    ON k.h = g.h
  WHERE
    g.bps >= CAST('2026-09-17 00:00:00' AS DATETIME)
    AND g.bps < CAST('2026-10-18 00:00:00' AS DATETIME)
  GROUP BY
    t.job,
    t.team,
    k.provider,
    k.currency,
    g.day,
    g.rank,
    g.signal,
    k.BillingAccountId
), ba_spot_hours AS (
  SELECT
    job,
    team,
    provider,
    currency,
    SUM(hm) AS spot_hours
  FROM (
    SELECT
      t.job AS job,
      t.team AS team,
      k.provider AS provider,
      k.currency AS currency,
      MAX(g.hours) AS hm
    FROM line_groups AS g
    JOIN ba_attr AS t
      ON t.h = g.h
    JOIN line_group_keys AS k
      ON k.h = g.h
    WHERE
      g.bps >= CAST('2026-09-17 00:00:00' AS DATETIME)
      AND g.bps < CAST('2026-10-18 00:00:00' AS DATETIME)
      AND g.rank = 6
      AND NOT g.cps IS NULL
      AND NOT g.cpe IS NULL
    GROUP BY
      t.job,
      t.team,
      k.provider,
      k.currency,
      g.cps,
      g.cpe
  ) AS s
  GROUP BY
    job,
    team,
    provider,
    currency
), ba_spot_res AS (
  SELECT
    t.job AS job,
    t.team AS team,
    k.provider AS provider,
    k.currency AS currency,
    k.ResourceId AS ResourceId,
    MIN(g.s) AS s,
    MAX(g.e) AS e,
    MIN(k.BillingAccountId) AS account
  FROM (
    SELECT
      g.h,
      MIN(g.cps) AS s,
      MAX(g.cpe) AS e
    FROM line_groups AS g
    WHERE
      g.bps >= CAST('2026-09-17 00:00:00' AS DATETIME)
      AND g.bps < CAST('2026-10-18 00:00:00' AS DATETIME)
      AND g.rank = 6
    GROUP BY
      g.h
  ) AS g
  JOIN ba_attr AS t
    ON t.h = g.h
  JOIN line_group_keys AS k
    ON k.h = g.h
  WHERE
    NOT k.ResourceId IS NULL AND t.job <> '(unattributed)'
  GROUP BY
    t.job,
    t.team,
    k.provider,
    k.currency,
    k.ResourceId
), ba_win AS (
  SELECT
    t.job AS job,
    t.team AS team,
    k.provider AS provider,
    k.currency AS currency,
    CASE g.rank
      WHEN 1
      THEN 'restart_fee'
      WHEN 2
      THEN 'other_compute_charge'
      WHEN 3
      THEN 'storage_reread'
      WHEN 4
      THEN 'checkpoint_egress'
      WHEN 5
      THEN 'interruption_signal'
      WHEN 6
      THEN 'spot_compute'
      WHEN 7
      THEN 'on_demand_compute'
      WHEN 8
      THEN 'custom'
    END AS category,
    g.signal AS signal,
    g.cps AS s,
    g.cpe AS e,
    SUM(g.n) AS n,
    SUM(g.effective) AS cost,
    SUM(g.fee_n) AS fee_n,
    k.BillingAccountId AS account
  FROM line_groups AS g
  JOIN ba_attr AS t
    ON t.h = g.h
  JOIN line_group_keys AS k
    ON k.h = g.h
  WHERE
    g.bps >= CAST('2026-09-17 00:00:00' AS DATETIME)
    AND g.bps < CAST('2026-10-18 00:00:00' AS DATETIME)
    AND (
      g.rank IN (1, 3, 4) OR g.signal
    )
  GROUP BY
    t.job,
    t.team,
    k.provider,
    k.currency,
    g.rank,
    g.signal,
    g.cps,
    g.cpe,
    k.BillingAccountId
), fired AS (
  SELECT
    h.rule_id AS rule_id,
    h.category AS category,
    COUNT(*) AS n
  FROM hits AS h
  JOIN line_items AS l
    ON l.x_LineItemId = h.x_LineItemId
  WHERE
    l.BillingPeriodStart >= CAST('2026-09-17 00:00:00' AS DATETIME)
    AND l.BillingPeriodStart < CAST('2026-10-18 00:00:00' AS DATETIME)
  GROUP BY
    h.rule_id,
    h.category
)
SELECT
  'agg' AS kind,
  job AS job,
  team AS team,
  provider AS provider,
  currency AS currency,
  day AS day,
  category AS category,
  signal AS signal,
  n AS n,
  cost AS cost,
  list_cost AS list_cost,
  fee_n AS fee_n,
  CAST(priced AS INT64) AS priced,
  CAST(NULL AS BIGNUMERIC) AS spot_hours,
  CAST(NULL AS STRING) AS ResourceId,
  CAST(NULL AS DATETIME) AS s,
  CAST(NULL AS DATETIME) AS e,
  CAST(NULL AS STRING) AS rule_id,
  CAST(unpriced AS BIGNUMERIC) AS unpriced,
  CAST(od_cost AS BIGNUMERIC) AS od_cost,
  account AS account
FROM ba_agg
UNION ALL
SELECT
  'hours' AS kind,
  job AS job,
  team AS team,
  provider AS provider,
  currency AS currency,
  CAST(NULL AS DATE) AS day,
  CAST(NULL AS STRING) AS category,
  CAST(NULL AS BOOL) AS signal,
  CAST(NULL AS INT64) AS n,
  CAST(NULL AS BIGNUMERIC) AS cost,
  CAST(NULL AS BIGNUMERIC) AS list_cost,
  CAST(NULL AS BIGNUMERIC) AS fee_n,
  CAST(NULL AS INT64) AS priced,
  spot_hours AS spot_hours,
  CAST(NULL AS STRING) AS ResourceId,
  CAST(NULL AS DATETIME) AS s,
  CAST(NULL AS DATETIME) AS e,
  CAST(NULL AS STRING) AS rule_id,
  CAST(NULL AS BIGNUMERIC) AS unpriced,
  CAST(NULL AS BIGNUMERIC) AS od_cost,
  CAST(NULL AS STRING) AS account
FROM ba_spot_hours
UNION ALL
SELECT
  'res' AS kind,
  job AS job,
  team AS team,
  provider AS provider,
  currency AS currency,
  CAST(NULL AS DATE) AS day,
  CAST(NULL AS STRING) AS category,
  CAST(NULL AS BOOL) AS signal,
  CAST(NULL AS INT64) AS n,
  CAST(NULL AS BIGNUMERIC) AS cost,
  CAST(NULL AS BIGNUMERIC) AS list_cost,
  CAST(NULL AS BIGNUMERIC) AS fee_n,
  CAST(NULL AS INT64) AS priced,
  CAST(NULL AS BIGNUMERIC) AS spot_hours,
  ResourceId AS ResourceId,
  s AS s,
  e AS e,
  CAST(NULL AS STRING) AS rule_id,
  CAST(NULL AS BIGNUMERIC) AS unpriced,
  CAST(NULL AS BIGNUMERIC) AS od_cost,
  account AS account
FROM ba_spot_res
UNION ALL
SELECT
  'win' AS kind,
  job AS job,
  team AS team,
  provider AS provider,
  currency AS currency,
  CAST(NULL AS DATE) AS day,
  category AS category,
  signal AS signal,
  n AS n,
  cost AS cost,
  CAST(NULL AS BIGNUMERIC) AS list_cost,
  fee_n AS fee_n,
  CAST(NULL AS INT64) AS priced,
  CAST(NULL AS BIGNUMERIC) AS spot_hours,
  CAST(NULL AS STRING) AS ResourceId,
  s AS s,
  e AS e,
  CAST(NULL AS STRING) AS rule_id,
  CAST(NULL AS BIGNUMERIC) AS unpriced,
  CAST(NULL AS BIGNUMERIC) AS od_cost,
  account AS account
FROM ba_win
UNION ALL
SELECT
  'rule' AS kind,
  CAST(NULL AS STRING) AS job,
  CAST(NULL AS STRING) AS team,
  CAST(NULL AS STRING) AS provider,
  CAST(NULL AS STRING) AS currency,
  CAST(NULL AS DATE) AS day,
  category AS category,
  CAST(NULL AS BOOL) AS signal,
  n AS n,
  CAST(NULL AS BIGNUMERIC) AS cost,
  CAST(NULL AS BIGNUMERIC) AS list_cost,
  CAST(NULL AS BIGNUMERIC) AS fee_n,
  CAST(NULL AS INT64) AS priced,
  CAST(NULL AS BIGNUMERIC) AS spot_hours,
  CAST(NULL AS STRING) AS ResourceId,
  CAST(NULL AS DATETIME) AS s,
  CAST(NULL AS DATETIME) AS e,
  rule_id AS rule_id,
  CAST(NULL AS BIGNUMERIC) AS unpriced,
  CAST(NULL AS BIGNUMERIC) AS od_cost,
  CAST(NULL AS STRING) AS account
FROM fired
