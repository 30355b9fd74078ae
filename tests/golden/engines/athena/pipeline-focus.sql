WITH line_items AS (
  SELECT
    CAST(BilledCost AS DECIMAL(38, 12)) AS BilledCost,
    BillingAccountId,
    BillingCurrency,
    BillingPeriodStart,
    ChargeCategory,
    NULLIF(ChargeDescription, '') AS ChargeDescription,
    ChargePeriodStart,
    ChargePeriodEnd,
    CAST(ConsumedQuantity AS DECIMAL(38, 12)) AS ConsumedQuantity,
    NULLIF(ConsumedUnit, '') AS ConsumedUnit,
    CAST(EffectiveCost AS DECIMAL(38, 12)) AS EffectiveCost,
    CAST(CASE
      WHEN (
        NOT ListCost IS NULL
        AND NOT (
          ListCost = 0
          AND (
            LOWER(COALESCE(ChargeCategory, '')) = 'usage'
            AND (
              COALESCE(BilledCost, 0) <> 0 OR COALESCE(EffectiveCost, 0) <> 0
            )
          )
        )
      )
      THEN ListCost
      WHEN (
        LOWER(COALESCE(ChargeCategory, '')) = 'usage'
        AND (
          COALESCE(BilledCost, 0) <> 0 OR COALESCE(EffectiveCost, 0) <> 0
        )
      )
      THEN NULL
      ELSE BilledCost
    END AS DECIMAL(38, 12)) AS ListCost,
    CASE
      WHEN FALSE
      THEN 'Dynamic'
      WHEN LOWER(TRIM(PricingCategory)) IN ('standard', 'on-demand', 'ondemand')
      THEN 'Standard'
      WHEN LOWER(TRIM(PricingCategory)) IN ('committed', 'commitment-based')
      THEN 'Committed'
      WHEN LOWER(TRIM(PricingCategory)) IN ('dynamic', 'spot')
      THEN 'Dynamic'
      WHEN LOWER(TRIM(PricingCategory)) = 'other'
      THEN 'Other'
      ELSE NULLIF(TRIM(PricingCategory), '')
    END AS PricingCategory,
    CAST(PricingQuantity AS DECIMAL(38, 12)) AS PricingQuantity,
    NULLIF(PricingUnit, '') AS PricingUnit,
    NULLIF(ResourceId, '') AS ResourceId,
    NULLIF(ResourceName, '') AS ResourceName,
    NULLIF(ServiceCategory, '') AS ServiceCategory,
    NULLIF(ServiceName, '') AS ServiceName,
    NULLIF(SkuMeter, '') AS SkuMeter,
    NULLIF(SubAccountId, '') AS SubAccountId,
    TRANSFORM_VALUES(
      MULTIMAP_FROM_ENTRIES(
        TRANSFORM(
          FILTER(
            MAP_KEYS(tags),
            k -> TRIM(ELEMENT_AT(tags, k)) <> ''
            AND LOWER(TRIM(REGEXP_REPLACE(k, '(?i)^\s*user[:_]', ''))) <> ''
          ),
          k -> ROW(LOWER(TRIM(REGEXP_REPLACE(k, '(?i)^\s*user[:_]', ''))), TRIM(ELEMENT_AT(tags, k)))
        )
      ),
      (k, v) -> v[1]
    ) AS Tags,
    CONCAT(
      CAST('aws-focus-' AS VARCHAR),
      CAST(LOWER(
        TO_HEX(
          MD5(
            TO_UTF8(
              CONCAT_WS(
                '|',
                CAST(COALESCE(CAST(availabilityzone AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(billedcost AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(billingaccountid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(billingaccountname AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(billingaccounttype AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(billingcurrency AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(billingperiodend AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(billingperiodstart AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(capacityreservationid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(capacityreservationstatus AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(chargecategory AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(chargeclass AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(chargedescription AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(chargefrequency AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(chargeperiodend AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(chargeperiodstart AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(commitmentdiscountcategory AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(commitmentdiscountid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(commitmentdiscountname AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(commitmentdiscountquantity AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(commitmentdiscounttype AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(commitmentdiscountunit AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(commitmentdiscountstatus AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(consumedquantity AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(consumedunit AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(contractedcost AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(contractedunitprice AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(effectivecost AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(invoiceid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(invoiceissuername AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(listcost AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(listunitprice AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(pricingcategory AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(pricingcurrency AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(pricingcurrencycontractedunitprice AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(pricingcurrencyeffectivecost AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(pricingcurrencylistunitprice AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(pricingquantity AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(pricingunit AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(providername AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(publishername AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(regionid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(regionname AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(resourceid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(resourcename AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(resourcetype AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(servicecategory AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(servicename AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(servicesubcategory AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(skuid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(skumeter AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(skupriceid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(subaccountid AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(subaccountname AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(subaccounttype AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(x_operation AS VARCHAR), '') AS VARCHAR),
                CAST(COALESCE(CAST(x_servicecode AS VARCHAR), '') AS VARCHAR)
              )
            )
          )
        )
      ) AS VARCHAR)
    ) AS x_LineItemId,
    'aws' AS x_Provider,
    COALESCE(NULLIF(NULL, ''), NULLIF(SkuMeter, '')) AS x_UsageType,
    COALESCE(
      NULL,
      CASE (
          CASE
            WHEN FALSE
            THEN 'Dynamic'
            WHEN LOWER(TRIM(PricingCategory)) IN ('standard', 'on-demand', 'ondemand')
            THEN 'Standard'
            WHEN LOWER(TRIM(PricingCategory)) IN ('committed', 'commitment-based')
            THEN 'Committed'
            WHEN LOWER(TRIM(PricingCategory)) IN ('dynamic', 'spot')
            THEN 'Dynamic'
            WHEN LOWER(TRIM(PricingCategory)) = 'other'
            THEN 'Other'
            ELSE NULLIF(TRIM(PricingCategory), '')
          END
        )
        WHEN 'Dynamic'
        THEN 'Spot'
        WHEN 'Standard'
        THEN 'OnDemand'
        WHEN 'Committed'
        THEN CASE
          WHEN LOWER(CommitmentDiscountType) LIKE LOWER('%savings%')
          THEN 'SavingsPlan'
          WHEN LOWER(CommitmentDiscountType) LIKE LOWER('%reserv%')
          THEN 'Reservation'
          WHEN LOWER(CommitmentDiscountType) LIKE LOWER('%committed use%')
          THEN 'CUD'
          ELSE 'Commitment'
        END
      END
    ) AS x_PricingModel,
    CASE
      WHEN (
        NOT ListCost IS NULL
        AND NOT (
          ListCost = 0
          AND (
            LOWER(COALESCE(ChargeCategory, '')) = 'usage'
            AND (
              COALESCE(BilledCost, 0) <> 0 OR COALESCE(EffectiveCost, 0) <> 0
            )
          )
        )
      )
      THEN 'ListCost'
      WHEN (
        LOWER(COALESCE(ChargeCategory, '')) = 'usage'
        AND (
          COALESCE(BilledCost, 0) <> 0 OR COALESCE(EffectiveCost, 0) <> 0
        )
      )
      THEN CASE
        WHEN ListCost = 0
        THEN 'missing: ListCost = 0'
        ELSE 'missing: ListCost empty'
      END
      ELSE 'BilledCost (no ListCost in export)'
    END AS x_ListCostSource
  FROM cur_db.focus_export
  WHERE
    billing_period = '2026-11'
), checkpoint_resources AS (
  SELECT DISTINCT
    x_Provider,
    ResourceId
  FROM line_items
  WHERE
    NOT ResourceId IS NULL
    AND (
      (
        LOWER(ELEMENT_AT(Tags, 'purpose')) IN ('checkpoint', 'checkpoints', 'ckpt')
      )
      OR (
        LOWER(ELEMENT_AT(Tags, 'role')) IN ('checkpoint', 'checkpoints', 'ckpt')
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
    CAST(x_LineItemId AS VARCHAR) AS x_LineItemId,
    'BA001' AS rule_id,
    'spot_compute' AS category
  FROM (
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
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS VARCHAR) AS x_LineItemId,
    'BA002' AS rule_id,
    'on_demand_compute' AS category
  FROM (
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
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS VARCHAR) AS x_LineItemId,
    'BA010' AS rule_id,
    'restart_fee' AS category
  FROM (
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
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS VARCHAR) AS x_LineItemId,
    'BA020' AS rule_id,
    'other_compute_charge' AS category
  FROM (
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
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS VARCHAR) AS x_LineItemId,
    'BA030' AS rule_id,
    'storage_reread' AS category
  FROM (
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
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS VARCHAR) AS x_LineItemId,
    'BA040' AS rule_id,
    'checkpoint_egress' AS category
  FROM (
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
  ) AS rule_output
  WHERE
    NOT x_LineItemId IS NULL
  UNION ALL
  SELECT DISTINCT
    CAST(x_LineItemId AS VARCHAR) AS x_LineItemId,
    'BA050' AS rule_id,
    'interruption_signal' AS category
  FROM (
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
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/training-job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/training_job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job-id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job_id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training-job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training_job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job-id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job_id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training.kubeflow.org/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training_kubeflow_org_job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/training.kubeflow.org/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'ray.io/cluster')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'ray_io_cluster')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/ray.io/cluster')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'volcano.sh/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'volcano_sh_job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/volcano.sh/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'jobset.sigs.k8s.io/jobset-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'jobset_sigs_k8s_io_jobset_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/jobset.sigs.k8s.io/jobset-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'batch.kubernetes.io/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'batch_kubernetes_io_job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/batch.kubernetes.io/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job-name')), '')
      )
    ) AS tag_job,
    LOWER(
      COALESCE(
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/team')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/cost-center')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/costcenter')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/owner')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'team')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'cost-center')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'costcenter')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'owner')), ''),
        CASE
          WHEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws_eks_namespace')), '') NOT LIKE 'kube:%'
          THEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws_eks_namespace')), '')
        END,
        CASE
          WHEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws:eks:namespace')), '') NOT LIKE 'kube:%'
          THEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws:eks:namespace')), '')
        END,
        CASE
          WHEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-namespace')), '') NOT LIKE 'kube:%'
          THEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-namespace')), '')
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
          WHEN REGEXP_LIKE(
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
          CAST(DATE_DIFF(
            'SECOND',
            DATE_TRUNC('SECOND', l.ChargePeriodStart),
            DATE_TRUNC('SECOND', l.ChargePeriodEnd)
          ) AS DOUBLE) / 3600.0,
          CASE
            WHEN LOWER(TRIM(COALESCE(l.PricingUnit, ''))) IN ('h', 'hr', 'hrs', 'hour', 'hours', '1 h', '1 hr', '1 hrs', '1 hour', '1 hours')
            THEN CAST(l.PricingQuantity AS DOUBLE)
            WHEN LOWER(TRIM(COALESCE(l.PricingUnit, ''))) IN ('10 hr', '10 hrs', '10 hour', '10 hours')
            THEN CAST(l.PricingQuantity AS DOUBLE) * 10
            WHEN LOWER(TRIM(COALESCE(l.PricingUnit, ''))) IN ('100 hr', '100 hrs', '100 hour', '100 hours')
            THEN CAST(l.PricingQuantity AS DOUBLE) * 100
            WHEN LOWER(TRIM(COALESCE(l.ConsumedUnit, ''))) IN ('h', 'hr', 'hrs', 'hour', 'hours', '1 h', '1 hr', '1 hrs', '1 hour', '1 hours')
            THEN CAST(l.ConsumedQuantity AS DOUBLE)
            WHEN LOWER(TRIM(COALESCE(l.ConsumedUnit, ''))) IN ('10 hr', '10 hrs', '10 hour', '10 hours')
            THEN CAST(l.ConsumedQuantity AS DOUBLE) * 10
            WHEN LOWER(TRIM(COALESCE(l.ConsumedUnit, ''))) IN ('100 hr', '100 hrs', '100 hour', '100 hours')
            THEN CAST(l.ConsumedQuantity AS DOUBLE) * 100
            ELSE CAST(DATE_DIFF(
              'SECOND',
              DATE_TRUNC('SECOND', l.ChargePeriodStart),
              DATE_TRUNC('SECOND', l.ChargePeriodEnd)
            ) AS DOUBLE) / 3600.0
          END
        )
      END AS DECIMAL(38, 12))
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
                CAST(NULL AS DECIMAL(38, 12))
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
                CAST(NULL AS DECIMAL(38, 12))
              )
              WHEN 'gcp'
              THEN (
                NULL
              )
              ELSE CASE WHEN l.ListCost > l.EffectiveCost THEN l.ListCost END
            END
          )
        END AS DECIMAL(38, 12))
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
                  CAST(NULL AS DECIMAL(38, 12))
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
                  CAST(NULL AS DECIMAL(38, 12))
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
                  CAST(NULL AS DECIMAL(38, 12))
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
                  CAST(NULL AS DECIMAL(38, 12))
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
    l.BillingPeriodStart >= CAST('2026-10-18 00:00:00' AS TIMESTAMP)
    AND l.BillingPeriodStart < CAST('2026-11-17 00:00:00' AS TIMESTAMP)
  GROUP BY
    l.x_Provider,
    COALESCE(l.BillingCurrency, '?'),
    l.ResourceId,
    l.ResourceName,
    l.SubAccountId,
    l.BillingAccountId,
    LOWER(
      COALESCE(
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/training-job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/training_job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job-id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job_id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training-job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training_job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job-id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job_id')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training.kubeflow.org/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'training_kubeflow_org_job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/training.kubeflow.org/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'ray.io/cluster')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'ray_io_cluster')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/ray.io/cluster')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'volcano.sh/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'volcano_sh_job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/volcano.sh/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'jobset.sigs.k8s.io/jobset-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'jobset_sigs_k8s_io_jobset_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/jobset.sigs.k8s.io/jobset-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'batch.kubernetes.io/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'batch_kubernetes_io_job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/batch.kubernetes.io/job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job-name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'job_name')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/job-name')), '')
      )
    ),
    LOWER(
      COALESCE(
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/team')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/cost-center')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/costcenter')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-label/owner')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'team')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'cost-center')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'costcenter')), ''),
        NULLIF(TRIM(ELEMENT_AT(l.Tags, 'owner')), ''),
        CASE
          WHEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws_eks_namespace')), '') NOT LIKE 'kube:%'
          THEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws_eks_namespace')), '')
        END,
        CASE
          WHEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws:eks:namespace')), '') NOT LIKE 'kube:%'
          THEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'aws:eks:namespace')), '')
        END,
        CASE
          WHEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-namespace')), '') NOT LIKE 'kube:%'
          THEN NULLIF(TRIM(ELEMENT_AT(l.Tags, 'k8s-namespace')), '')
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
      ORDER BY provider, currency, ResourceId, ResourceName, SubAccountId, BillingAccountId, tag_job, tag_team
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
      g.bps >= CAST('2026-10-18 00:00:00' AS TIMESTAMP)
      AND g.bps < CAST('2026-11-17 00:00:00' AS TIMESTAMP)
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
      ROW_NUMBER() OVER (PARTITION BY provider, ResourceId ORDER BY SUM(n) DESC, tag_job) AS rn
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
      ROW_NUMBER() OVER (PARTITION BY provider, ResourceId ORDER BY SUM(n) DESC, tag_team) AS rn
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
    COALESCE(k.tag_job, rj.tag_job, CAST(NULL AS VARCHAR)) AS line_job,
    COALESCE(
      k.tag_team,
      rt.tag_team,
      CAST(NULL AS VARCHAR),
      CAST(NULL AS VARCHAR),
      CAST(NULL AS VARCHAR)
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
      ROW_NUMBER() OVER (PARTITION BY line_job ORDER BY SUM(n) DESC, line_team) AS rn
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
    g.bps >= CAST('2026-10-18 00:00:00' AS TIMESTAMP)
    AND g.bps < CAST('2026-11-17 00:00:00' AS TIMESTAMP)
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
      g.bps >= CAST('2026-10-18 00:00:00' AS TIMESTAMP)
      AND g.bps < CAST('2026-11-17 00:00:00' AS TIMESTAMP)
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
      g.bps >= CAST('2026-10-18 00:00:00' AS TIMESTAMP)
      AND g.bps < CAST('2026-11-17 00:00:00' AS TIMESTAMP)
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
    g.bps >= CAST('2026-10-18 00:00:00' AS TIMESTAMP)
    AND g.bps < CAST('2026-11-17 00:00:00' AS TIMESTAMP)
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
    l.BillingPeriodStart >= CAST('2026-10-18 00:00:00' AS TIMESTAMP)
    AND l.BillingPeriodStart < CAST('2026-11-17 00:00:00' AS TIMESTAMP)
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
  CAST(priced AS BIGINT) AS priced,
  CAST(NULL AS DECIMAL(38, 12)) AS spot_hours,
  CAST(NULL AS VARCHAR) AS ResourceId,
  CAST(NULL AS TIMESTAMP) AS s,
  CAST(NULL AS TIMESTAMP) AS e,
  CAST(NULL AS VARCHAR) AS rule_id,
  CAST(unpriced AS DECIMAL(38, 12)) AS unpriced,
  CAST(od_cost AS DECIMAL(38, 12)) AS od_cost,
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
  CAST(NULL AS VARCHAR) AS category,
  CAST(NULL AS BOOLEAN) AS signal,
  CAST(NULL AS BIGINT) AS n,
  CAST(NULL AS DECIMAL(38, 12)) AS cost,
  CAST(NULL AS DECIMAL(38, 12)) AS list_cost,
  CAST(NULL AS DECIMAL(38, 12)) AS fee_n,
  CAST(NULL AS BIGINT) AS priced,
  spot_hours AS spot_hours,
  CAST(NULL AS VARCHAR) AS ResourceId,
  CAST(NULL AS TIMESTAMP) AS s,
  CAST(NULL AS TIMESTAMP) AS e,
  CAST(NULL AS VARCHAR) AS rule_id,
  CAST(NULL AS DECIMAL(38, 12)) AS unpriced,
  CAST(NULL AS DECIMAL(38, 12)) AS od_cost,
  CAST(NULL AS VARCHAR) AS account
FROM ba_spot_hours
UNION ALL
SELECT
  'res' AS kind,
  job AS job,
  team AS team,
  provider AS provider,
  currency AS currency,
  CAST(NULL AS DATE) AS day,
  CAST(NULL AS VARCHAR) AS category,
  CAST(NULL AS BOOLEAN) AS signal,
  CAST(NULL AS BIGINT) AS n,
  CAST(NULL AS DECIMAL(38, 12)) AS cost,
  CAST(NULL AS DECIMAL(38, 12)) AS list_cost,
  CAST(NULL AS DECIMAL(38, 12)) AS fee_n,
  CAST(NULL AS BIGINT) AS priced,
  CAST(NULL AS DECIMAL(38, 12)) AS spot_hours,
  ResourceId AS ResourceId,
  s AS s,
  e AS e,
  CAST(NULL AS VARCHAR) AS rule_id,
  CAST(NULL AS DECIMAL(38, 12)) AS unpriced,
  CAST(NULL AS DECIMAL(38, 12)) AS od_cost,
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
  CAST(NULL AS DECIMAL(38, 12)) AS list_cost,
  fee_n AS fee_n,
  CAST(NULL AS BIGINT) AS priced,
  CAST(NULL AS DECIMAL(38, 12)) AS spot_hours,
  CAST(NULL AS VARCHAR) AS ResourceId,
  s AS s,
  e AS e,
  CAST(NULL AS VARCHAR) AS rule_id,
  CAST(NULL AS DECIMAL(38, 12)) AS unpriced,
  CAST(NULL AS DECIMAL(38, 12)) AS od_cost,
  account AS account
FROM ba_win
UNION ALL
SELECT
  'rule' AS kind,
  CAST(NULL AS VARCHAR) AS job,
  CAST(NULL AS VARCHAR) AS team,
  CAST(NULL AS VARCHAR) AS provider,
  CAST(NULL AS VARCHAR) AS currency,
  CAST(NULL AS DATE) AS day,
  category AS category,
  CAST(NULL AS BOOLEAN) AS signal,
  n AS n,
  CAST(NULL AS DECIMAL(38, 12)) AS cost,
  CAST(NULL AS DECIMAL(38, 12)) AS list_cost,
  CAST(NULL AS DECIMAL(38, 12)) AS fee_n,
  CAST(NULL AS BIGINT) AS priced,
  CAST(NULL AS DECIMAL(38, 12)) AS spot_hours,
  CAST(NULL AS VARCHAR) AS ResourceId,
  CAST(NULL AS TIMESTAMP) AS s,
  CAST(NULL AS TIMESTAMP) AS e,
  rule_id AS rule_id,
  CAST(NULL AS DECIMAL(38, 12)) AS unpriced,
  CAST(NULL AS DECIMAL(38, 12)) AS od_cost,
  CAST(NULL AS VARCHAR) AS account
FROM fired
