"""Teachers with another tokenizer: per-token diagnosis across model families (opd_jax/teachers/cross.py).

  python -m opd_jax.main --config=configs/cross_tokenizer.py            # Qwen 0.5B student, SmolLM2 teacher: 3.3 min
  python -m opd_jax.main --config=configs/cross_tokenizer.py:reverse    # SmolLM2 student, Qwen 0.5B teacher: 5.3 min*
  ... --config.scoring.cross_tokenizer.mode=canonical                    # the canonical-tokens approximation

The default study's task, template and node choice (configs/teacher_sweep.py) at a small budget, with a
teacher of another tokenizer: SmolLM2-135M-Instruct (49,152 ids) for the Qwen2.5-Coder-0.5B-Instruct student
(151,665 real ids), and the other way round (on sums of two one-digit numbers, which the 135M gets right about
20% of the time: `benchmarks/task_probe.py`; it gets none of the default's sums right). Next to it, a teacher
of the student's own tokenizer as a reference (the 1.5B external teacher; in `:reverse` the SmolLM2 student
with the reference solution). Each candidate's teacher probability is the probability that the teacher's
continuation of the node's text begins with the candidate's bytes (exact over every teacher tokenization, or
its canonical tokens). Runtimes: a 2-core CPU, warm model cache; * with another study on the cores
(docs/results.md, "Teachers with another tokenizer").
"""
from configs import teacher_sweep


def get_config(arg: str | None = None):
  config = teacher_sweep.get_config()
  config.name = "cross_tokenizer"
  config.configurations = {
      "smollm2": "smollm2-135m-instruct:plain:reverse_kl",          # another tokenizer
      "external": "qwen2.5-coder-1.5b-instruct:plain:reverse_kl",   # the student's tokenizer
  }
  config.task.num_problems = 24
  config.budget.questions = 4
  if arg == "reverse":
    config.name = "cross_tokenizer_reverse"
    config.student.name = "smollm2-135m-instruct"
    config.task.name = ('reasoning_gym:basic_arithmetic:min_terms=2,max_terms=2,min_digits=1,max_digits=1,'
                        'operators=("+",),allow_parentheses=False,allow_negation=False')   # the 135M: ~20% right
    config.configurations = {
        "qwen": "qwen2.5-coder-0.5b-instruct:plain:reverse_kl",     # another tokenizer
        "solution": "self:solution:reverse_kl",                     # the student's tokenizer
    }
  elif arg:
    raise ValueError(f"unknown variant {arg!r} of cross_tokenizer; use '' or 'reverse'")
  return config
