"""The study, in run order: preflight (checks, plan), checklist, pipeline (rollouts, views, nodes,
continuations per question), nodes, targeted (continuations) with allocation, looks (the sequential design),
records and runs (workdir, lock, resume)."""
