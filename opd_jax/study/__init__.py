"""The study, in run order: preflight (config checks, policies, context lengths), planning (the plan and its
estimated time), model_specs (specs checked from names and headers), checklist (what a run prints first),
environment (models, views, mesh), questions (one question: rollouts, grades, views scored, nodes,
continuations), pipeline (the run over the questions, resumable, then the report), with nodes (node rows),
targeted and allocation (targeted continuations) and runs (processes, progress). The workdir's lock is
opd_jax/claim.py, the sequential design report/looks.py, the one schema of the records opd_jax/records.py."""
