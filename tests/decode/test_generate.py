"""Greedy decoding equals HF transformers' greedy `generate` on tiny HF checkpoints loaded by our loader."""
import jax
import numpy as np
import pytest

from opd_jax import models
from opd_jax.decode import sampling

torch = pytest.importorskip("torch")
from tests.models.test_parity import make_hf_folder  # pylint: disable=g-import-not-at-top,wrong-import-position


@pytest.mark.parametrize("arch,tie", [("llama", True), ("qwen2", False), ("qwen3", True)])
def test_greedy_matches_hf_generate_for_32_steps(tmp_path, arch, tie):
  hf = make_hf_folder(tmp_path, arch, tie=tie, seed=3)
  ours = models.load(str(tmp_path), dtype="float32")
  prompts = [[5, 17, 99, 3, 42, 7], [8, 9, 10]]
  got = sampling.sample(ours, prompts, key=jax.random.key(0), max_new_tokens=32, temperature=0.0, stop_ids=())
  padded = list(range(ours.config.real_vocab_size, ours.config.vocab_size))   # ids the tokenizer lacks: never drawn
  assert padded
  for r, prompt in enumerate(prompts):
    with torch.no_grad():
      ref = hf.generate(torch.tensor([prompt]), attention_mask=torch.ones(1, len(prompt), dtype=torch.long),
                        do_sample=False, max_new_tokens=32, min_new_tokens=32, eos_token_id=None,
                        pad_token_id=0, suppress_tokens=padded)[0, len(prompt):].numpy()
    np.testing.assert_array_equal(got.tokens[r], ref)
    assert got.lengths[r] == 32 and not got.finished[r]
