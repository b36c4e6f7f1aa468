"""Decode speed: our on-device sampler vs HF transformers `generate`, same model, same CPU, side by side.

  python benchmarks/sampling.py                         # real Qwen2.5-Coder-0.5B (offline preset), ~15 min
  python benchmarks/sampling.py --batches=1,8 --new_tokens=32 --reps=3

Pure sampling on both sides: temperature 1, top_k 0, top_p 1, exactly --new_tokens new tokens per row (no
stop tokens: our stop_ids=(); HF min_new_tokens = max_new_tokens), same prompt, same dtype (fp32) and threads.
Each side runs in its own subprocess; repetitions are interleaved and medians reported. Our first call per
shape includes compilation: it is reported as compile_s and excluded from the medians. Ends with one JSON line.
"""
from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from benchmarks import harness  # pylint: disable=g-import-not-at-top

PROMPT = ("Natalia sold clips to 48 of her friends in April, and then she sold half as many clips to her friends "
          "in May. How many clips did Natalia sell altogether in April and May?")


def _prompt_ids(tokenizer):
  msgs = [{"role": "user", "content": PROMPT}]
  text = tokenizer.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
  return tokenizer(text, add_special_tokens=False)["input_ids"]


def ours(args):
  import time  # pylint: disable=g-import-not-at-top
  import jax  # pylint: disable=g-import-not-at-top
  from opd_jax import models, sampling  # pylint: disable=g-import-not-at-top
  model = models.load(args.model, dtype="float32")
  prompt = _prompt_ids(model.tokenizer)
  n_params = sum(x.size for x in jax.tree.leaves(model.params))
  seen = set()

  def handle(cmd):
    B, N = cmd["batch"], cmd["new_tokens"]
    compile_s = None
    if (B, N) not in seen:
      t0 = time.perf_counter()
      sampling.sample(model, [prompt] * B, key=jax.random.key(0), max_new_tokens=N, stop_ids=())
      compile_s = time.perf_counter() - t0
      seen.add((B, N))
    t0 = time.perf_counter()
    out = sampling.sample(model, [prompt] * B, key=jax.random.key(cmd["rep"] + 1), max_new_tokens=N, stop_ids=())
    dt = time.perf_counter() - t0
    assert int(out.lengths.sum()) == B * N
    return {"seconds": dt, "tokens": B * N, "first_call_s": compile_s, "n_params": n_params,
            "dtype": "float32", "threads": os.cpu_count(), "prompt_len": len(prompt)}
  harness.serve(handle)


def hf(args):
  import time  # pylint: disable=g-import-not-at-top
  import torch  # pylint: disable=g-import-not-at-top
  import transformers  # pylint: disable=g-import-not-at-top
  from opd_jax.models import checkpoints  # pylint: disable=g-import-not-at-top
  torch.set_num_threads(args.threads)
  path, _ = checkpoints.preset_file(args.model)
  tok = transformers.AutoTokenizer.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path))
  model = transformers.AutoModelForCausalLM.from_pretrained(os.path.dirname(path), gguf_file=os.path.basename(path),
                                                            torch_dtype=torch.float32).eval()
  prompt = _prompt_ids(tok)
  n_params = sum(p.numel() for p in model.parameters())

  def handle(cmd):
    B, N = cmd["batch"], cmd["new_tokens"]
    ids = torch.tensor([prompt] * B)
    torch.manual_seed(cmd["rep"])
    t0 = time.perf_counter()
    with torch.no_grad():
      out = model.generate(ids, attention_mask=torch.ones_like(ids), do_sample=True, temperature=1.0, top_k=0,
                           top_p=1.0, min_new_tokens=N, max_new_tokens=N, pad_token_id=tok.pad_token_id)
    dt = time.perf_counter() - t0
    assert out.shape[1] - len(prompt) == N
    return {"seconds": dt, "tokens": B * N, "n_params": n_params, "dtype": "float32",
            "threads": torch.get_num_threads(), "prompt_len": len(prompt)}
  harness.serve(handle)


def main():
  ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  ap.add_argument("--model", default="qwen2.5-coder-0.5b-instruct")
  ap.add_argument("--batches", default="1,8,32")
  ap.add_argument("--new_tokens", type=int, default=64)
  ap.add_argument("--reps", type=int, default=3)
  ap.add_argument("--threads", type=int, default=os.cpu_count())
  ap.add_argument("--side", choices=["ours", "hf"], help=argparse.SUPPRESS)
  args = ap.parse_args()
  if args.side:
    return (ours if args.side == "ours" else hf)(args)
  argv = [sys.executable, os.path.abspath(__file__), f"--model={args.model}", f"--threads={args.threads}"]
  sides = {"ours": harness.Worker(argv + ["--side=ours"]), "hf": harness.Worker(argv + ["--side=hf"])}
  rows, figures = [], {}
  for B in [int(b) for b in args.batches.split(",")]:
    runs = {s: [] for s in sides}
    for rep in range(args.reps):
      for s, w in sides.items():
        runs[s].append(w(batch=B, new_tokens=args.new_tokens, rep=rep))
    for s, rs in runs.items():
      sec = harness.median([r["seconds"] for r in rs])
      tps = rs[0]["tokens"] / sec
      rows.append({"side": s, "batch": B, "new_tokens": args.new_tokens, "dtype": rs[0]["dtype"],
                   "threads": rs[0]["threads"], "tokens/s": tps,
                   "GFLOP/s": 2 * rs[0]["n_params"] * tps / 1e9,
                   "first_call_s": rs[0].get("first_call_s") or 0.0,
                   "mem_above_load_MB": harness.median([r["peak_above_load_mb"] for r in rs])})
      figures[f"{s}_tokens_per_s_b{B}"] = round(tps, 2)
    figures[f"speedup_b{B}"] = round(figures[f"ours_tokens_per_s_b{B}"] / figures[f"hf_tokens_per_s_b{B}"], 3)
  for w in sides.values():
    w.close()
  print(harness.table(rows, ["side", "batch", "new_tokens", "dtype", "threads", "tokens/s", "GFLOP/s",
                             "first_call_s", "mem_above_load_MB"]))
  print("GFLOP/s = 2 x params x tokens/s (weights only). first_call_s (ours) includes compilation.")
  last = max(int(b) for b in args.batches.split(","))
  figures.update(benchmark="sampling", model=args.model, new_tokens=args.new_tokens, reps=args.reps,
                 speedup=figures[f"speedup_b{last}"],
                 load_seconds={s: round(w.ready["load_seconds"], 1) for s, w in sides.items()})
  print(json.dumps(figures))


if __name__ == "__main__":
  main()
