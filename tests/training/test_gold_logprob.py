"""The held-out gold answer's log-probability (`evaluate.gold_logprob`, issue 47's low-noise outcome) against a full
causal forward of the prompt and the answer (`models.logits`, log-softmax in numpy); its files in a training run are
checked in test_train_seed.py (which runs the trainer)."""
import numpy as np
import scipy.special

from opd_jax import models
from opd_jax.models import decoder
from opd_jax.tasks import answers
from opd_jax.tasks import base
from opd_jax.training import evaluate

CONFIG = decoder.Config(arch="qwen2", vocab_size=260, d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                        d_ff=64, max_seq_len=128)


def test_gold_logprob_is_the_sum_of_the_answers_token_logprobs_after_the_prompt():
  tok = models.byte_tokenizer()
  model = models.random_model(CONFIG, seed=3, tokenizer=tok)
  problems = [base.Problem(id=f"q{i}", question=f"{i} + 2 = ?", answer=str(i + 2)) for i in (5, 40, 97)]
  task = base.Task(name="t", problems=problems, template="{question}", extractor=answers.answer_tag,
                   grader=lambda p, a: a == p.answer, answer_span=("<answer>", "</answer>"))
  prompts = [tok(p.question, add_special_tokens=False)["input_ids"] for p in problems]
  got = evaluate.gold_logprob(model, task, problems, prompts, batch_size=2)
  assert got.shape == (3,) and got.dtype == np.float64
  for p, x, g in zip(problems, prompts, got):
    y = tok(f"<answer>{p.answer}</answer>", add_special_tokens=False)["input_ids"]
    logits = np.asarray(models.logits(model, np.array([x + y])), np.float64)[0]
    logp = scipy.special.log_softmax(logits, axis=-1)
    want = sum(logp[len(x) - 1 + j, t] for j, t in enumerate(y))     # position i predicts token i + 1
    assert np.isclose(g, want, rtol=1e-4, atol=1e-3), (g, want)
  plain = base.Task(name="t", problems=problems, template="{question}", extractor=answers.extract_number,
                    grader=lambda p, a: True)
  assert evaluate.gold_response(plain, problems[0]) == "7"
  assert evaluate.gold_response(task, problems[0]) == "<answer>7</answer>"

