"""models.export.write_hf: a (LoRA-merged) model written as an HF folder loads back in opd_jax and runs the same
logits in HF transformers (PyTorch, CPU)."""
import jax
import numpy as np
import pytest

from opd_jax import models
from opd_jax.models import export
from opd_jax.training import lora


@pytest.mark.parametrize("arch", ["qwen2"])
def test_merged_lora_model_round_trips_through_opd_jax_and_transformers(tmp_path, arch):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  tok = models.byte_tokenizer()
  cfg = models.Config(arch=arch, vocab_size=len(tok), d_model=32, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=8,
                      d_ff=64, qkv_bias=arch == "qwen2", max_seq_len=128)
  base = models.random_model(cfg, seed=0, tokenizer=tok, layout="layered")
  ad = lora.init(base.params, jax.random.key(1), rank=2)
  ad = jax.tree.map(lambda x: x + 0.1, ad)
  merged = models.Model(config=cfg, params=lora.merge(base.params, ad, scale=2.0), graphdef=base.graphdef,
                        tokenizer=tok, stop_ids=base.stop_ids, name="merged", sha256=None, source="test")
  folder = export.write_hf(merged, tmp_path / "hf")
  back = models.load(str(folder))
  tokens = np.random.default_rng(0).integers(0, 250, (2, 9))
  ours = np.asarray(models.logits(merged, tokens))
  np.testing.assert_allclose(np.asarray(models.logits(back, tokens)), ours, atol=1e-5)
  hf_model = transformers.AutoModelForCausalLM.from_pretrained(str(folder), dtype=torch.float32).eval()
  with torch.no_grad():
    theirs = hf_model(torch.as_tensor(tokens)).logits.numpy()
  real = tok.real_vocab_size if hasattr(tok, "real_vocab_size") else ours.shape[-1]
  np.testing.assert_allclose(theirs[..., :real], ours[..., :real], atol=1e-4)
