/*
id: BA002
name: on_demand_compute.gpu
title: On-demand GPU and accelerator compute
category: on_demand_compute
severity: info
providers: [aws, azure, gcp]
description: |
  GPU compute bought at the on-demand (standard) price: the other side of the
  spot vs on-demand comparison.  AWS BoxUsage of GPU families, Azure GPU series
  meters without Spot / Low Priority, GCP GPU and accelerator SKUs that are
  neither spot nor preemptible nor committed.
*/
select
  x_LineItemId,
  'on-demand GPU compute: ' || coalesce(x_UsageType, ChargeDescription) as reason
from line_items
where ChargeCategory = 'Usage'
  and coalesce(PricingCategory, 'Standard') = 'Standard'
  and lower(coalesce(x_PricingModel, 'ondemand')) not in ('spot', 'preemptible', 'low priority', 'reservation', 'savingsplan')
  and not regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription, SkuMeter)),
    'spot|preemptible|low priority|commitment|restart|recovery|overhead|local storage|\bssd\b|\bdisk\b|\bstorage\b')
  and (
    regexp_matches(lower(coalesce(x_UsageType, '')),
      '(boxusage|dedicatedusage|hostusage):(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6|p6e|g3|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|trn1|trn1n|trn2|inf1|inf2|dl1|dl2q)\.')
    or (x_Provider = 'azure' and regexp_matches(lower(concat_ws(' ', x_UsageType, SkuMeter)),
      '^virtual machines.*\b(nc|nd|nv|ng)[0-9]+'))
    or (x_Provider = 'gcp' and regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)),
      '\b(gpu|nvidia|tesla|a100|h100|h200|b200|l4|t4|v100|p100|tpu)\b'))
  )
