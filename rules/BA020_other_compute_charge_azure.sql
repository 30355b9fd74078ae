/*
id: BA020
name: other_compute_charge.azure
title: Azure "Other Compute Charges"
category: other_compute_charge
severity: medium
providers: [azure]
description: |
  Lines Azure Cost Management lists under the "Other Compute Charges" meter
  subcategory (or category), where per-restart fees of spot VMs appear.  Reports
  count the restart fees among them once, as restart fees (see the category
  precedence); the rest is reported as other compute charges.
*/
select
  x_LineItemId,
  'Azure Other Compute Charges: ' || coalesce(x_UsageType, ChargeDescription) as reason
from line_items
where x_Provider = 'azure'
  and regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription, SkuMeter)), 'other compute charges?')
