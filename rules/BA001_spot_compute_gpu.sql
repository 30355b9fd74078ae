/*
id: BA001
name: spot_compute.gpu
title: Spot / preemptible GPU and accelerator compute
category: spot_compute
severity: info
providers: [aws, azure, gcp]
description: |
  The spot capacity interrupted training runs on: AWS SpotUsage of GPU and
  accelerator instance families, Azure spot meters on GPU series (NC, ND, NV),
  GCP spot/preemptible GPU, TPU and accelerator-optimised SKUs in both naming
  styles ("... GPU attached to Spot Preemptible VMs", "Spot Preemptible Nvidia ...").
  Restart fees are left to BA010 even when they mention spot.
*/
select
  x_LineItemId,
  'spot GPU compute: ' || coalesce(x_UsageType, ChargeDescription) as reason
from line_items
where ChargeCategory = 'Usage'
  and (
    PricingCategory = 'Dynamic'
    or lower(coalesce(x_PricingModel, '')) in ('spot', 'preemptible', 'low priority')
    or regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)), 'spotusage|spot preemptible|preemptible|\bspot\b')
  )
  and (
    regexp_matches(lower(coalesce(x_UsageType, '')),
      'spotusage:(p2|p3|p3dn|p4d|p4de|p5|p5e|p5en|p6|p6e|g3|g4dn|g4ad|g5|g5g|g6|g6e|g6f|gr6|trn1|trn1n|trn2|inf1|inf2|dl1|dl2q)\.')
    or (x_Provider = 'azure' and regexp_matches(lower(concat_ws(' ', x_UsageType, SkuMeter, ChargeDescription)),
      '\b(nc|nd|nv|ng)[0-9]+[a-z_ ]*'))
    or (x_Provider = 'gcp' and regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)),
      '\b(gpu|nvidia|tesla|a100|h100|h200|b200|l4|t4|v100|p100|p4|tpu|a2|a3|a4|g2)\b'))
  )
  and not regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription, SkuMeter)),
    'restart|recovery|relaunch|overhead|local storage|\bssd\b|\bdisk\b|\bstorage\b')
