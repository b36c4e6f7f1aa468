"""opd_jax: diagnoses on-policy distillation without training (README.md)."""
from opd_jax import terminal as _terminal

_terminal.quiet_startup()        # before transformers or jax start: their startup chatter off (terminal.py)
