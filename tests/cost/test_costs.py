"""The accelerator cost model (opd_jax/cost/estimate.py): compiled single-step FLOPs against 2 N tokens, trip counts,
and the `--dry_run --cost_model` command line."""
import dataclasses
import json
import pathlib
import subprocess
import sys

import pytest

from benchmarks import harness
from configs import smoke
from opd_jax.cost import estimate
from opd_jax.cost import programs
from opd_jax.study import model_specs
from opd_jax.study import planning
from opd_jax.models import decoder
from opd_jax.teachers import contexts

REPO = pathlib.Path(__file__).resolve().parents[2]
# Matmul-dominated tiny shapes (the head and the MLP dwarf softmax and norms), 4 layers: extrapolated from 1 and 2.
TINY = decoder.Config(arch="qwen3", vocab_size=4096, d_model=512, n_layers=4, n_heads=8, n_kv_heads=2, head_dim=64,
                      d_ff=2048, qk_norm=True, tie_embeddings=True, max_seq_len=256)


@pytest.mark.parametrize("kind,rows,tokens,slots,layers", [("chunk", 2, 16, 32, 4), ("decode", 8, 1, 32, 2)])
def test_single_step_flops_match_2N_per_token_plus_attention(kind, rows, tokens, slots, layers):
  c = dataclasses.replace(TINY, n_layers=layers)           # 4: extrapolated from 1 and 2 layers; 2: compiled as is
  got = programs.program_flops(kind, c, rows, tokens, slots)
  attention = 4 * c.n_layers * rows * tokens * slots * c.n_heads * c.head_dim     # q.k and p.v over every slot
  want = 2 * harness.matmul_params(c) * rows * tokens + attention
  assert abs(got / want - 1) < 0.15, (got, want)


def test_layer_extrapolation_equals_the_full_depth_compile():
  direct = programs._compiled_flops("chunk", TINY, 2, 16, 32)                 # 4 layers unrolled, one compile
  assert programs.program_flops("chunk", TINY, 2, 16, 32) == pytest.approx(direct, rel=1e-6)


def test_trip_counts_of_the_smoke_study_and_their_sum(monkeypatch):
  # Per-call FLOPs stubbed by a known function of the shapes (no compile): the test is about the counts.
  fake = lambda kind, cfg, rows, tokens, slots, *_: float(cfg.n_layers * rows * tokens * (slots + 1) + len(kind))
  monkeypatch.setattr(programs, "_compiled_flops", fake)
  config = smoke.get_config()
  plan = planning.plan(config)
  cs = estimate.calls(config)
  count = lambda stage, kind: sum(c.count for c in cs if (c.stage, c.kind) == (stage, kind))
  n_tok, blocks = 12, 2                          # 3 questions in blocks of 2; token cap 12
  assert count("rollouts", "decode") == blocks * n_tok
  assert count("rollouts", "prefill") == blocks
  # Scoring: T = 16 response slots in chunks of 8 -> 2 chunks per batch; one batch of 2 rows per question; 5 views:
  # the student's body once, the head only for the other 4, a teacher body for every view but self:plain.
  assert plan.scored_rollouts == 6 and plan.scoring_passes == 5
  assert count("scoring", "predictors") == 5 * 3 * 2
  assert count("scoring", "head") == 4 * 3 * 2
  assert count("scoring", "chunk") == (1 + 4) * 3 * 2
  # Continuations: 192 per question in batches of 32 (6 batches), n_tok / 2 tokens each, plus one start step each.
  assert plan.continuations == 576
  assert count("continuations", "decode") == 3 * 6 + 576 * (n_tok // 2) / 32
  total = estimate.cost(cs, None)
  by_hand = sum(c.count * fake(c.kind, c.cfg, c.rows, c.tokens, c.slots) for c in cs)   # smoke: 2 layers, as is
  assert total.flops == pytest.approx(by_hand, rel=1e-9)
  stages = [estimate.cost([c for c in cs if c.stage == s], None) for s in estimate.STAGES]
  assert sum(s.flops for s in stages) == pytest.approx(total.flops, rel=1e-9)


def test_realized_work_sets_the_prompt_widths_and_counts(monkeypatch):
  """`Work` replaces the plan's bounds: sampled questions -> rollout blocks, prompt tokens -> prefill widths,
  a context's extra tokens (+ the incorrect rollout for contrastive) -> its scoring prompt, continuations and
  their length -> decode steps."""
  monkeypatch.setattr(programs, "_compiled_flops", lambda *key: 1.0)
  config = smoke.get_config()
  n_tok, q = 12, 3
  work = estimate.Work(prompt_tokens=40.5, context_tokens={"solution": 30.0, "contrastive": 50.0}, incorrect_tokens=6,
                    sampled_questions=5, continuations=90, continuation_tokens=3)
  cs = estimate.calls(config, work=work)
  one = lambda stage, kind, model="student": [c for c in cs if (c.stage, c.kind, c.model) == (stage, kind, model)]
  prefill, = one("rollouts", "prefill")
  assert (prefill.tokens, prefill.count) == (64, 3)            # ceil(40.5) = 41 -> 64 columns; ceil(5 / 2) blocks
  assert one("rollouts", "decode")[0].count == 3 * n_tok
  width = lambda p: sum(c.tokens * c.count for c in one("scoring", "prompt", p)) / q   # prompt columns per question
  assert width("student") == 64                                # 41 -> 64
  assert width("student (solution)") == 96                     # 41 + 30 = 71 -> 96
  assert width("student (contrastive)") == 128                 # 41 + 50 + 6 = 97 -> 128
  decode, = one("continuations", "decode")
  assert decode.count == pytest.approx(q * 1 + 90 * 3 / 32)    # 30 per question: one batch of 32 rows each
  assert work.extra("summary", n_tok) == contexts.ASSUMED_TOKENS and work.extra("contrastive", n_tok) == 56


def test_architecture_table_without_weights_and_bad_names():
  config = smoke.get_config()
  assert model_specs.architecture("/data/Qwen3-8B", config) == model_specs.ARCHITECTURES["qwen3-8b"]
  assert harness.matmul_params(model_specs.ARCHITECTURES["qwen3-8b"]) == pytest.approx(7.6e9, rel=0.05)   # "8B"
  assert estimate.accelerator("v5e-64") == (estimate.ACCELERATORS["v5e"], 64)
  with pytest.raises(ValueError, match="unknown accelerator"):
    estimate.accelerator("a100")
  with pytest.raises(ValueError, match="ARCHITECTURES"):
    model_specs.architecture("/nowhere/Mystery-7B", config)


def test_cli_prints_the_table_for_smoke_and_one_line_errors(tmp_path):
  cfg = f"--config={REPO / 'configs/smoke.py'}"
  cases = [{"argv": [cfg, "--dry_run", "--cost_model=h200"]}, {"argv": [cfg, "--dry_run", "--cost_model=a100"]},
           {"argv": [cfg, "--cost_model=h200"]},
           {"argv": [cfg, "--dry_run", "--cost_model=h200", f"--variance_split={tmp_path / 'none.json'}"]},
           {"argv": [cfg, "--dry_run", "--variance_split=x.json"]}]
  (tmp_path / "cases.json").write_text(json.dumps(cases))
  subprocess.run([sys.executable, str(REPO / "tests/cli_batch.py"), str(tmp_path / "cases.json"),
                  str(tmp_path / "out.json")], check=True, cwd=REPO, timeout=300)
  ok, bad, no_dry, no_split, no_model = json.loads((tmp_path / "out.json").read_text())
  for got, says in ((no_split, "not a variance split"), (no_model, "--variance_split needs --dry_run --cost_model")):
    assert got["code"] == 2 and got["stderr"].startswith("error:") and says in got["stderr"] and not got["stdout"]
  assert ok["code"] == 0, ok["stderr"]
  lines = ok["stdout"].splitlines()
  assert any(l.startswith("planned:") for l in lines) and lines[0].startswith("task:")   # the checklist first
  for stage in estimate.STAGES + ("total",):
    assert any(l.split()[:1] == [stage] for l in lines), stage
  assert any(l.strip().startswith("hours per question:") for l in lines)
  assert bad["code"] == 2 and bad["stderr"].startswith("error: --cost_model='a100'") and not bad["stdout"]
  assert no_dry["code"] == 2 and "needs --dry_run" in no_dry["stderr"]


def test_measured_efficiencies_scale_the_roofline(monkeypatch):
  """The dry run's second estimate: the same calls at estimate.MEASURED's fractions of peak instead of the assumed."""
  monkeypatch.setattr(programs, "_compiled_flops", lambda *key: 1e15)             # compute-bound on any chip
  cs = [estimate.Call("scoring", "chunk", "student", TINY, 1, 16, 32, 10)]
  chip, n = estimate.accelerator("h200")
  assumed, measured = (estimate.cost(cs, chip, n, eff=e).acc_s for e in ((estimate.EFF_FLOPS, estimate.EFF_BW),
                                                                      estimate.MEASURED["h200"]))
  assert measured / assumed == pytest.approx(estimate.EFF_FLOPS / estimate.MEASURED["h200"][0])
  line = estimate.measured_line(cs, "h200", chip, n, per=2)
  assert f"{measured / 3600:.3g} h ({measured / 2 / 3600:.3g} h per question)" in line, line
  assert "no measured efficiencies" in estimate.measured_line(cs, "v5e-64", *estimate.accelerator("v5e-64"))


def test_design_hours_scale_by_the_measured_stops(monkeypatch):
  """The sequential design's hours per question of the cap are the measured stop fractions (looks.MEASURED_STOP,
  and looks.MEASURED_FUTILE with a calibrated futility threshold) times the hours per question run; the fixed
  design's bound is computed with looks and futility off."""
  from opd_jax.report import looks
  monkeypatch.setattr(programs, "_compiled_flops", lambda *key: 1e12)
  config = smoke.get_config()
  config.budget.questions = 40
  config.budget.looks = (10, 20)
  chip, n = estimate.accelerator("h200")
  lines = estimate._design_hours(config, estimate.Work(), 2.0, chip, n, "h200")
  lo, hi = looks.MEASURED_STOP[0.5][0], looks.MEASURED_STOP[0.0][1]
  assert f"sequential: {lo * 2:.3g}-{hi * 2:.3g} h per question of the cap" in lines[1] and len(lines) == 2
  config.budget.futility = 0.1
  lines = estimate._design_hours(config, estimate.Work(), 2.0, chip, n, "h200")
  flo, fhi = looks.MEASURED_FUTILE[0.1]
  assert lines[2].startswith(f"  futility 0.1: {flo * 2:.3g}-{fhi * 2:.3g} h per question of the cap")
  assert "futility 0.1 also stops it" in looks.expected_text(config) and "not calibrated" in looks.futility_text(
      _with(config, futility=0.2))
  assert looks.futility_text(_with(config, futility=0.0)) == ""


def _with(config, **budget):
  c = config.copy_and_resolve_references()
  for k, v in budget.items():
    c.budget[k] = v
  return c


def test_the_memory_line_warns_past_a_gpus_preallocated_fraction(monkeypatch):
  """JAX on a GPU gets XLA_PYTHON_CLIENT_MEM_FRACTION of its memory (0.75 unless set); a TPU its whole HBM."""
  h200, v5p = estimate.ACCELERATORS["h200"], estimate.ACCELERATORS["v5p"]
  monkeypatch.delenv("XLA_PYTHON_CLIENT_MEM_FRACTION", raising=False)
  assert h200.usable_bytes() == 0.75 * 141e9 and v5p.usable_bytes() == 95e9
  assert estimate.memory_line(141e9, h200, 1, "1 x H200").startswith(
      "  WARNING: weights + the largest KV cache need 141 GB in bf16, more than 106 GB usable of 1 x 141 GB")
  assert estimate.memory_line(141e9, h200, 2, "2 x H200").startswith("  memory on 2 x H200: weights + the largest "
                                                                     "KV cache 141 GB in bf16 of 212 GB usable")
  assert estimate.memory_line(94e9, v5p, 1, "1 x v5p").startswith("  memory on 1 x v5p: ")
  monkeypatch.setenv("XLA_PYTHON_CLIENT_MEM_FRACTION", "0.95")
  assert h200.usable_bytes() == pytest.approx(0.95 * 141e9)
  assert estimate.memory_line(120e9, h200, 1, "1 x H200").startswith("  memory on 1 x H200")
