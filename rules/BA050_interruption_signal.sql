/*
id: BA050
name: interruption_signal.text
title: Lines that say a spot or preemptible resource was interrupted
category: interruption_signal
severity: low
providers: [aws, gcp]
description: |
  Any line whose description, usage type or meter says capacity was interrupted,
  evicted, preempted or reclaimed.  "Preemptible" alone (the name of GCP's spot
  SKUs) is not a signal; "preempted" / "preemption" is.  Used to count
  interruptions where the bill has no per-restart fee lines.
*/
select
  x_LineItemId,
  'interruption signal: ' || coalesce(ChargeDescription, x_UsageType) as reason
from line_items
where regexp_matches(lower(concat_ws(' ', ChargeDescription, x_UsageType, SkuMeter)),
    '\b(interrupted|interruptions?|evicted|evictions?|preempted|preemptions?|reclaimed|reclamations?)\b')
