"""The spec's data model: types and values, partition specs, and what manifests say of files.

The bottom room of the kernel: it imports nothing of the planner but `errors`, and every
other room reads and writes its models.

- `types`: Iceberg's types, fields with ids, schemas, and the internal value representation;
- `literals`: user values to internal values and back (`to_internal`);
- `conversions`: the spec's single-value binary serialization (bounds, partition summaries);
- `transforms`: partition transforms (`bucket[16]`, `day`, ...) and what they compute;
- `partitioning`: partition specs and sort orders;
- `files`: data and delete file descriptions, manifest entries and manifests;
- `metric_maps`: a manifest entry's column metrics, decoded when asked for;
- `reserved_field_ids`: the spec's reserved field ids of metadata columns.
"""
