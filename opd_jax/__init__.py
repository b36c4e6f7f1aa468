"""opd_jax: diagnoses on-policy distillation without training (README.md)."""
from opd_jax import stages as _stages

_stages.quiet_startup()          # before transformers or jax start: their startup chatter off (stages.py)
