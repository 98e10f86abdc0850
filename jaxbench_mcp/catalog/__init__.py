"""The catalog: workloads and their formats, targets, docs, context conditions, expert references."""
