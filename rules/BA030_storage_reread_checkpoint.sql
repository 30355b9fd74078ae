/*
id: BA030
name: storage_reread.checkpoint
title: Checkpoint re-reads from object storage
category: storage_reread
severity: medium
providers: [aws, azure, gcp]
params:
  checkpoint_tag_keys: {default: [purpose, role], description: tag keys that mark checkpoint storage}
  checkpoint_tag_values: {default: [checkpoint, checkpoints, ckpt], description: values of those keys that mean checkpoint storage}
description: |
  Read requests, retrieval and read operations on storage that holds training
  checkpoints: a restarted job restores its checkpoint, so these reads are
  restart overhead.  Checkpoint storage is a resource in checkpoint_resources
  (tagged purpose/role = checkpoint, named like *checkpoint* / *ckpt*, or listed
  in the configuration) or a line carrying such a tag itself.  Writes (S3
  Requests-Tier1 PUT/COPY/POST/LIST, Azure write operations, GCP Class A) never match.
*/
select
  x_LineItemId,
  'checkpoint re-read: ' || coalesce(x_UsageType, ChargeDescription) || ' on ' || coalesce(ResourceName, ResourceId, SubAccountId, '?') as reason
from line_items
where ChargeCategory = 'Usage'
  and (
    regexp_matches(lower(coalesce(x_UsageType, '')), 'requests-tier2|requests-gda-tier2|retrieval-|-bytes-retrieved|requests-int-tier2')
    or regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)),
         'read operations|all other operations|data retrieval|class b operations|retrieval|(^|\|)read$')
  )
  and not regexp_matches(lower(concat_ws(' ', x_UsageType, ChargeDescription)), 'requests-tier1|write operations|class a operations|list operations')
  and (
    ResourceId in (select ResourceId from checkpoint_resources)
    or list_has_any(list_transform($checkpoint_tag_keys, lambda k: lower(Tags[k])), $checkpoint_tag_values)
  )
