"""opd_jax: diagnoses on-policy distillation without training (README.md)."""
import signal as _signal
import sys as _sys

EARLY_INTERRUPT: list[int] = []   # Ctrl-C presses during `python -m opd_jax.main`'s imports (main.exit_on_interrupt)
if _sys.orig_argv[1:3] == ["-m", "opd_jax.main"]:           # only that command: a library import changes nothing
  _signal.signal(_signal.SIGINT, lambda *_: EARLY_INTERRUPT.append(1))
from opd_jax import terminal as _terminal

_terminal.quiet_startup()        # before transformers or jax start: their startup chatter off (terminal.py)
