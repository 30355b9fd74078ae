/*
id: BA040
name: checkpoint_egress.transfer_out
title: Data transfer out of checkpoint storage
category: checkpoint_egress
severity: medium
providers: [aws, azure, gcp]
params:
  checkpoint_tag_keys: {default: [purpose, role], description: tag keys that mark checkpoint storage}
  checkpoint_tag_values: {default: [checkpoint, checkpoints, ckpt], description: values of those keys that mean checkpoint storage}
description: |
  Internet, inter-region and cross-zone transfer out of checkpoint storage: a
  job restarted elsewhere pulls its checkpoint across the network.  AWS
  DataTransfer-Out-Bytes, <REG>-<REG>-AWS-Out-Bytes, DataTransfer-xAZ/Regional-Bytes;
  Azure Bandwidth (Data Transfer Out, Inter-Region, Intra Continent); GCP Network
  ... Data Transfer Out / Egress.  Transfer into storage never matches.
*/
select
  x_LineItemId,
  'checkpoint egress: ' || coalesce(x_UsageType, ChargeDescription) || ' from ' || coalesce(ResourceName, ResourceId, SubAccountId, '?') as reason
from line_items
where ChargeCategory = 'Usage'
  and (
    regexp_matches(lower(coalesce(x_UsageType, '')), 'out-bytes|datatransfer-regional-bytes|datatransfer-xaz')
    or regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)),
         '^bandwidth\||data transfer out|inter[- ]region|intra continent|egress|network .* out\b')
  )
  and not regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)), 'in-bytes|data transfer in\b|ingress')
  and (
    ResourceId in (select ResourceId from checkpoint_resources)
    or list_has_any(list_transform($checkpoint_tag_keys, lambda k: lower(Tags[k])), $checkpoint_tag_values)
  )
