"""The trainer's export (training/loop.export_student, models/export.write_hf): a bf16 student with LoRA adapters,
written as an HF folder and loaded back by opd_jax and by HF transformers (PyTorch, CPU), runs the model the trainer
evaluated (issue 34, item 4).

Tolerances. The trainer evaluates a bf16 student with its adapters unmerged (`lora.adapt`): each adapted matmul
is h W + s (h A) B summed in fp32 and rounded once to bf16. No export loaded in another precision or another
framework reproduces that forward's per-logit rounding: its own bf16 round-off (rho below: rms of that forward
minus the fp32 forward of the same weights, on the base model) is 4x the rms of the whole update's effect here.
So the export is held to
  (1) its weights: each adapted matrix is W + s A B within one fp32 rounding (2^-24 |W'|), where a bf16 export is
      one bf16 rounding (up to 2^-9 |W'|) that here rounds every entry back to W;
  (2) opd_jax and transformers agree on its logits to fp32 round-off (1e-5);
  (3) against the trainer's bf16 evaluation forward: within its round-off per logit (rms below 1.1 rho), carrying
      the update it evaluated: the least-squares slope of the evaluated change of the logits (adapted - base, both
      in the trainer's forward) on the export's change is in 0.85-1.15 (as tests/training/test_training_lora.py holds the
      bf16 forward to the fp32 model; 0.95 measured).
The old export (`lora.merge` cast to bf16) keeps none of the update: it fails (1) and (3)'s slope (0).
"""
import dataclasses
import json

from flax import nnx
import jax
import numpy as np
import pytest

from opd_jax import models
from opd_jax.models import export
from opd_jax.models import model as model_lib
from opd_jax.training import loop
from opd_jax.training import lora

TOK = models.byte_tokenizer()
CFG = models.Config(arch="qwen2", vocab_size=len(TOK), d_model=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=16,
                    d_ff=128, qkv_bias=True, max_seq_len=64)
HALF_ULP = 2.0 ** -12      # half a bf16 ulp of every adapted weight (|W| in [1.02, 1.12] x 2^-4)
SCALE = 2.0
TOKENS = np.random.default_rng(0).integers(0, 250, (64, 14)).astype(np.int32)


def _student(dtype: str, layout: str = "layered"):
  """A random bf16-representable student in `dtype`, drawn in numpy (no op compiles): Block matrices with |W| in
  [1.02, 1.12] x 2^-4 (random signs, so an update below HALF_ULP rounds away in bf16), the rest normal(0, 0.02),
  norms 1; layered as the trainer loads it, or stacked."""
  rng = np.random.default_rng(0)
  shapes = jax.eval_shape(lambda: models.init_params(jax.random.key(0), CFG))        # the stacked layout

  def leaf(path, x):
    name = path[-1].key
    if "norm" in name:
      return np.ones(x.shape)
    if name in lora.BLOCK_MATMULS:
      return rng.choice([-1.0, 1.0], x.shape) * (1.02 + 0.1 * rng.random(x.shape)) * 2.0 ** -4
    return 0.02 * rng.normal(size=x.shape)

  arrays = jax.tree_util.tree_map_with_path(lambda p, x: np.asarray(leaf(p, x), jax.numpy.bfloat16), shapes)

  def read(key, i, shape, np_dtype):
    x = arrays["layers"][key[len("layers/"):]] if key.startswith("layers/") else arrays[key]
    return (x if i is None else x[i]).astype(np_dtype)

  graphdef, params = model_lib.build(CFG, read, layout=layout, dtype=dtype)
  return models.Model(config=CFG, params=params, graphdef=graphdef, tokenizer=TOK, stop_ids=(TOK.eos_token_id,),
                      name="student", sha256=None, source="test")


def _adapters(params, size: float) -> dict:
  """Rank-4 adapters on every Block matrix, a ~ normal(0, 1 / Din) as `lora.init`, b random and scaled so that
  max |SCALE a b| = size x HALF_ULP in each matrix (numpy float32)."""
  rng = np.random.default_rng(1)
  out = {}
  for path, shape in sorted(lora.targets(params).items()):
    d_in, d_out = shape
    a = rng.normal(size=(d_in, 4)) / np.sqrt(d_in)
    b = rng.normal(size=(4, d_out))
    b *= size * HALF_ULP / np.max(np.abs(SCALE * a @ b))
    out[path] = {"a": a.astype(np.float32), "b": b.astype(np.float32)}
  return out


def _logits(model, params=None) -> np.ndarray:
  """models.logits of `model` (with `params` instead of its own) on TOKENS: float64 [B, T, V]."""
  model = model if params is None else dataclasses.replace(model, params=params)
  return np.asarray(models.logits(model, TOKENS), np.float64)


def _slope(got, want) -> float:
  """Least-squares slope of got on want."""
  return float(np.sum(got * want) / np.sum(want * want))


def _rms(x) -> float:
  return float(np.sqrt(np.mean(np.square(x))))


def _matrix(model, path: str) -> np.ndarray:
  """The param at lora's "/"-joined path (layers/<i>/<name>) as float64."""
  node = nnx.to_pure_dict(model.params)
  for k in path.split("/"):
    node = node[int(k) if k.isdigit() else k]
  return np.asarray(node, np.float64)


def test_bf16_lora_export_runs_the_model_the_trainer_evaluated_in_opd_jax_and_transformers(tmp_path, caplog):
  torch = pytest.importorskip("torch")
  transformers = pytest.importorskip("transformers")
  s16, s32 = _student("bfloat16"), _student("float32")            # the same weights
  ad, zero = _adapters(s16.params, 0.9), _adapters(s16.params, 0.0)
  adapt = jax.jit(lambda b, a: lora.adapt(b, a, scale=SCALE))      # training.loop's current(): what it evaluates
  evaluated, evaluated_base = _logits(s16, adapt(s16.params, ad)), _logits(s16, adapt(s16.params, zero))
  base32 = _logits(s32)
  rho = _rms(evaluated_base - base32)                  # the evaluation forward's own round-off (on the base model)

  new = loop.export_student(s16, ad, SCALE, tmp_path / "new")
  old = export.write_hf(dataclasses.replace(s16, params=lora.merge(s16.params, ad, scale=SCALE)), tmp_path / "old")
  stacked, layered = (export.write_hf(m, tmp_path / m.layout) / "model.safetensors"
                      for m in (_student("bfloat16", "stacked"), s16))
  assert stacked.read_bytes() == layered.read_bytes()               # either layout writes the same file
  assert json.loads((new / "config.json").read_text())["torch_dtype"] == "float32"
  assert json.loads((old / "config.json").read_text())["torch_dtype"] == "bfloat16"

  # (1) Weights, reloaded by opd_jax in fp32: W + s A B (float64 numpy) to one fp32 rounding; the old export is W.
  back, back_old = models.load(str(new), dtype="float32"), models.load(str(old), dtype="float32")
  for path, x in ad.items():
    w, update = _matrix(s32, path), SCALE * x["a"].astype(np.float64) @ x["b"].astype(np.float64)
    np.testing.assert_allclose(_matrix(back, path) - w, update, rtol=0, atol=2.0 ** -24 * np.max(np.abs(w + update)))
    np.testing.assert_array_equal(_matrix(back_old, path), w)
  np.testing.assert_array_equal(_matrix(back, "embed"), _matrix(s32, "embed"))          # the rest as it was
  with caplog.at_level("WARNING"):                # loaded narrower, the export says what it loses; the old, nothing
    models.load(str(new), dtype="bfloat16")
    models.load(str(old), dtype="bfloat16")
  warned = [r.getMessage() for r in caplog.records if "LoRA export" in r.getMessage()]
  assert len(warned) == 1 and str(new) in warned[0] and "14 of its 27 tensors are stored in float32" in warned[0]

  # (2) transformers, loaded as a user would (no dtype: config.json's float32), runs the same logits. The old export
  # (config.json bfloat16) loads in fp32 only when asked: its most favourable reading.
  def hf_logits(folder, **kw):
    m = transformers.AutoModelForCausalLM.from_pretrained(str(folder), **kw).eval()
    assert m.dtype == torch.float32
    with torch.no_grad():
      return m(torch.as_tensor(TOKENS, dtype=torch.long)).logits.double().numpy()
  ours, theirs = _logits(back), hf_logits(new)
  theirs_old = hf_logits(old, dtype=torch.float32)
  np.testing.assert_allclose(theirs, ours, rtol=0, atol=1e-5)

  # (3) Against the trainer's bf16 evaluation forward: within its round-off, with the update it evaluated.
  for got in (ours, theirs):
    assert _rms(got - evaluated) < 1.1 * rho
    assert 0.85 < _slope(evaluated - evaluated_base, got - base32) < 1.15
  assert abs(_slope(theirs_old - base32, evaluated - evaluated_base)) < 0.05       # the old: none of it
