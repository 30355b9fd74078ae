/*
id: BA010
name: restart_fee.interrupted_spot
title: Per-restart fees for interrupted spot capacity
category: restart_fee
severity: high
providers: [aws, azure, gcp]
params:
  min_cost: {default: 0, description: ignore fee lines whose billed cost is below this}
description: |
  Cloud contracts meter each restart of an interrupted spot job as its own line:
  AWS "interrupted compute restart fee" / "spot interruption recovery charge",
  Azure "Spot Restart Fee" under Other Compute Charges, GCP "preemption overhead".
  Matched on meaning, not one string: a spot/interruption word (spot, preempt,
  interrupt, evict, reclaim, low priority) AND a restart word (restart, recovery,
  relaunch, resume, overhead) in the description, usage type, meter or SKU.
  Ordinary spot usage, storage, network and support lines never match.
*/
select
  x_LineItemId,
  'restart fee: ' || coalesce(ChargeDescription, x_UsageType)
    || ' (' || coalesce(CAST(ConsumedQuantity AS VARCHAR), '?') || ' ' || coalesce(ConsumedUnit, 'units') || ')' as reason
from line_items
where ChargeCategory in ('Usage', 'Purchase', 'Adjustment')
  and coalesce(BilledCost, 0) >= $min_cost
  and regexp_matches(lower(concat_ws(' ', ChargeDescription, x_UsageType, SkuMeter)),
    'spot|preempt|interrupt|evict|reclaim|low[- ]priority')
  and regexp_matches(lower(concat_ws(' ', ChargeDescription, x_UsageType, SkuMeter)),
    'restart|recover|relaunch|resum|overhead')
  and coalesce(ServiceCategory, '') not in ('Storage', 'Networking', 'Databases')
  and not regexp_matches(lower(concat_ws(' ', ChargeDescription, x_UsageType, ServiceName)),
    'support|storage|snapshot|backup|data transfer|egress|bandwidth|-bytes|requests-tier')
