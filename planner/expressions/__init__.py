"""Row filters and what metadata can prove about them.

Above `spec`; knows nothing of tables, manifests or planning.

- `tree`: the expression tree, unbound (by name) and bound (by field id), and `bind`;
- `filter_parser`: `--filter EXPR`, parsed into an unbound expression;
- `projections`: row filters projected onto partition fields (inclusive and strict) and
  per-partition residuals;
- `evaluators`: which manifests and partitions a filter can skip, from metadata alone;
- `metrics_evaluator`: which data and delete files it can skip, by their column metrics;
- `filter_evaluators`: one scan's evaluators, projected onto each partition spec, cached.
"""
