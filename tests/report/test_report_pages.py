"""Issue 27, item 9: report pages a newcomer can read. Per-token pages start with the question, gold and extracted
answers and reward, show the response once, and label links for people; the comparison page keeps its verdict
column wide (measured in Chromium); legends sit clear of the data; report.html explains every column."""
import html
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest

from opd_jax import report
from opd_jax.report import compare
from opd_jax.report import figures
from opd_jax.report import page
from opd_jax.report import token_pages
from test_report_router import tiny_study   # pylint: disable=g-bad-import-order

BROWSER = shutil.which("chromium") or shutil.which("chromium-browser") or shutil.which("google-chrome")
SPECIAL = {256: "<|im_start|>", 257: "<|im_end|>"}
decode = lambda t: SPECIAL.get(t, chr(t))                # a byte tokenizer with two chat markers
encode = lambda s: [ord(c) for c in s]
QID = "basic_arithmetic-seed0-cfgd9035a1c-{:05d}"


def chat(question, system=None):
  sys_part = [256] + encode(f"system\n{system}") + [257] + encode("\n") if system else []
  return sys_part + [256] + encode(f"user\n{question}") + [257] + encode("\n") + [256] + encode("assistant\n")


def study(configs=("A", "B", "C"), n_tokens=12):
  """Nodes of `configs` on 2 questions x 1 rollout (3 nodes each), tokens of one view, rollout records."""
  rng = np.random.default_rng(0)
  nodes, tokens, rollouts = [], [], []
  for qi, (question, gold, got) in enumerate((("What is 17 + 25? Answer with a number.", "42", "41"),
                                              ("How many legs do 3 spiders have?", "24", "24"))):
    qid, response = QID.format(qi), encode(f"answer: {got} ok"[:n_tokens].ljust(n_tokens, "."))
    for c in configs:
      for pos in (0, 4, 9):
        nodes.append(dict(question_id=qid, rollout_id=1, config_id=c, teacher=f"t{c}", context="plain",
                          divergence="reverse_kl", correct=got == gold, position=pos, alignment=rng.uniform(-1, 1),
                          alignment_nan_reason="", teacher_advantage=rng.normal(0, 0.1), degenerate=False))
    tokens.append(pd.DataFrame(dict(question_id=qid, rollout_id=1, position=np.arange(n_tokens), token=response,
                                    teacher="tA", context="plain", kl_pq=rng.exponential(size=n_tokens))))
    rollouts.append(dict(question_id=qid, question_index=7 + qi, rollout_id=1,
                         prompt_ids=chat(question, "Be brief."), text="".join(map(decode, response)),
                         answer=gold, extracted=got, reward=float(got == gold), truncated=False))
  return pd.DataFrame(nodes), pd.concat(tokens, ignore_index=True), pd.DataFrame(rollouts)


def pages(tmp_path, **kw):
  nodes, tokens, rollouts = study()
  links = token_pages.write_pages(str(tmp_path), nodes, tokens, decode=decode, rollouts=rollouts, **kw)
  return links, rollouts, {p: (tmp_path / p).read_text() for p, _ in links}


def test_every_page_starts_with_the_question_gold_extracted_answer_and_reward(tmp_path):
  _, rollouts, files = pages(tmp_path)
  for i, r in enumerate(rollouts.sort_values("reward").itertuples()):    # incorrect first
    text = files[f"html/rollout-{i:04d}.html"]
    question = token_pages.question_text(r.prompt_ids, decode)
    want = ["What is 17 + 25? Answer with a number.", "How many legs do 3 spiders have?"][r.question_index - 7]
    assert question == want
    body = text.split("<body>")[1]
    assert html.escape(question) in body and body.index(html.escape(question)) < body.index("Response")
    for label, value in (("gold answer", r.answer), ("extracted answer", r.extracted), ("reward", f"{r.reward:g}")):
      assert f"<dt>{label}</dt><dd>{value}" in body
    assert "Be brief" not in body                   # the system prompt is not the question


@pytest.mark.parametrize("rendered, want", [
    ("<|im_start|>user\nAdd 2 and 3.<|im_end|>\n<|im_start|>assistant\n", "Add 2 and 3."),
    ("<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nsys<|eot_id|><|start_header_id|>user"
     "<|end_header_id|>\n\nAdd 2 and 3.<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n", "Add 2 and 3."),
    ("<bos><start_of_turn>user\nAdd 2 and 3.<end_of_turn>\n<start_of_turn>model\n", "Add 2 and 3."),
    ("Question: Add 2 and 3.\nAnswer:", "Question: Add 2 and 3.\nAnswer:"),
])
def test_question_text_is_the_user_message_of_the_chat_formats(rendered, want):
  pieces = [rendered[i:i + 3] for i in range(0, len(rendered), 3)]      # a "tokenizer" of 3-character tokens
  assert token_pages.question_text(list(range(len(pieces))), lambda t: pieces[t]).replace("<bos>", "") == want
  assert token_pages.question_text([1, 2], None) is None


def test_response_is_shown_once_with_a_selector_and_a_node_table(tmp_path):
  _, _, files = pages(tmp_path)
  text = files["html/rollout-0000.html"]
  spans = re.findall(r'<span title="[^"]*" style="([^"]*)">', text)
  assert len(spans) == 12                                          # 12 tokens, not 12 x (3 configs + 1 view)
  assert "answer: 41 o" not in text                                # the one-piece text is not repeated
  assert text.count('type="radio"') == 3 + 1                       # A, B, C by alignment; kl_pq of the view
  assert all(f"--c{i}:" in spans[0] for i in range(4)) and "--c0" not in spans[1]   # position 0 is a node
  table = text.split("Nodes by configuration")[1]
  assert table.count("<tr>") == 2 + 3 + 1                          # 2 header rows, 3 nodes, the mean
  # Without a tokenizer the tokens show as ids, and the decoded text is shown once.
  nodes, tokens, rollouts = study()
  info = token_pages.rollout_info(rollouts)[(QID.format(0), 1)]
  bare = token_pages.rollout_page(nodes, tokens[tokens.question_id == QID.format(0)], question_id=QID.format(0),
                                  rollout_id=1, correct=False, info=info)
  assert bare.count("answer: 41 o") == 1 and "[97]" in bare and "needs the tokenizer" in bare


def test_a_page_opens_on_the_first_configuration_with_defined_values():
  """Issue 35, item 7: configuration A undefined at every node of the rollout (NaN: degenerate), so the page opens
  on B; with every configuration undefined, on the first view with a finite predictor; with none, on A."""
  nodes, tokens, _ = study()
  qid = QID.format(0)
  at = nodes.question_id == qid
  toks = tokens[tokens.question_id == qid]

  def opened(frame, toks=toks):
    text = token_pages.rollout_page(frame, toks, question_id=qid, rollout_id=1, correct=False, decode=decode)
    ids = re.findall(r'<input type="radio" name="colour" id="o(\d+)"( checked)?>', text)
    assert [c for _, c in ids].count(" checked") == 1
    return [int(i) for i, c in ids if c][0]

  assert opened(nodes) == 0
  nodes.loc[at & (nodes.config_id == "A"), "alignment"] = np.nan
  assert opened(nodes) == 1
  nodes.loc[at, "alignment"] = np.nan
  assert opened(nodes) == 3                                        # A, B, C undefined: the kl_pq view
  assert opened(nodes, toks.assign(kl_pq=np.nan)) == 0             # nothing defined: the first option


def test_link_texts_name_questions_for_people_not_by_id(tmp_path):
  links, rollouts, files = pages(tmp_path)
  texts = [label for _, label in links] + re.findall(r"<a [^>]*>([^<]*)</a>", files["html/index.html"])
  for qid in rollouts["question_id"]:
    assert not any(qid in t for t in texts)
  assert "question 7 &quot;What is 17 + 25? Answer with a...&quot;, rollout 1, incorrect" in files[
      "html/index.html"]
  assert links[2][1] == 'question 8 "How many legs do 3 spiders have?", rollout 1, correct'
  assert token_pages.first_words("one two three four five six seven eight nine") == (
      "one two three four five six seven eight...")


@pytest.mark.skipif(BROWSER is None, reason="no Chromium: apt-get install -y chromium (see .ci/run)")
def test_verdict_column_keeps_its_width_in_chromium(tmp_path):
  line = ("UNDERPOWERED on incorrect nodes (contrastive: 3 questions with a defined alignment, need 10; 9 nodes "
          "with a defined alignment, need 10): no decision; not comparable: external (3), solution_jsd (3)")
  verdicts = [dict(name=f"study {i}, student qwen3-1.7b-instruct-{'x' * 30}, task reasoning_gym:basic_arithmetic",
                   workdir=f"/work/runs/{'very-long-workdir-name-' * 4}{i}", verdict="underpowered", line=line,
                   best="A", target="incorrect", level=0.95, n_boot=10, seed=0) for i in range(3)]
  table = pd.DataFrame([dict(study=i, config_id="A", mean_alignment=0.1, ci_lo=0.0, ci_hi=0.2, underpowered=True,
                             comparable="", n_shared_questions=3) for i in range(3)])
  probe = ("<script>const r=document.querySelector('table.verdicts tr:nth-child(2)').children;document.body"
           ".setAttribute('data-w',[3,4].map(i=>r[i].getBoundingClientRect().width).join(','))</script></body>")
  path = tmp_path / "comparison.html"
  path.write_text(compare.render(table, verdicts).replace("</body>", probe))
  run = subprocess.run([BROWSER, "--headless", "--no-sandbox", "--disable-gpu", "--window-size=1200,900",
                        "--dump-dom", path.as_uri()], capture_output=True, text=True, timeout=60, check=False)
  verdict_w, line_w = map(float, re.search(r'data-w="([\d.]+),([\d.]+)"', run.stdout).groups())
  assert verdict_w >= 80 and line_w >= 400, (verdict_w, line_w)   # was ~one word per line for the line


def corners(n_configs=3):
  """where rows with alignment and teacher advantage at +-1 in the first and last bins of every panel."""
  rows = []
  for group in ("incorrect", "correct"):
    for i, c in enumerate(f"config-{k}" for k in range(n_configs)):
      for b, name in enumerate(("q1", "q2", "q3")):
        v = [1.0, 0.0, -1.0][b] * (1 if i % 2 else -1) if b != 1 else 0.0
        rows.append(dict(split="entropy_p", bin=name, group=group, config_id=c, mean_alignment=v, ci_lo=v - 0.05,
                         ci_hi=v + 0.05, mean_teacher_advantage=-v, adv_ci_lo=-v - 0.05, adv_ci_hi=-v + 0.05))
  return pd.DataFrame(rows)


def test_legends_never_cover_data_points():
  where = corners()
  summary = pd.DataFrame([dict(config_id=c, group=g, mean_alignment=v, alignment_ci_lo=v - 0.1,
                               alignment_ci_hi=v + 0.1, ci_level=0.95)
                          for c, v in (("a", 0.99), ("b", -0.99), ("c", 0.99))
                          for g in ("correct", "incorrect", "all")])
  preds = pd.DataFrame([dict(config_id=c, predictor=p, auroc=u, auroc_lo=u - 0.02, auroc_hi=u + 0.02)
                        for c in ("a", "b") for p, u in (("kl_pq", 0.99), ("js", 0.5), ("tv", 0.01))])
  for fig in (figures.where_figure(where, "entropy_p"), figures.alignment_figure(summary),
              figures.predictor_figure(preds)):
    assert fig.legends and figures.legend_overlaps(fig) == 0
  assert figures.where_split(where, "entropy_p")[:8] == b"\x89PNG\r\n\x1a\n"


def test_legend_overlap_check_sees_a_legend_over_data():
  fig = figures._figure(4, 3)       # pylint: disable=protected-access
  ax = fig.add_subplot(1, 1, 1)
  ax.plot([0, 0.5, 1], [0, 0.5, 1], "o", label="series with a long name")
  ax.legend(loc="center")
  assert figures.legend_overlaps(fig) >= 1


def test_report_explains_every_column_including_the_filter(tmp_path):
  workdir = tiny_study(tmp_path / "run")
  report.write_summary(str(workdir), n_boot=20, n_boot_predictors=5, pages=0, plot=False)
  text = (workdir / "report.html").read_text()
  headers = re.findall(r"<th( title=\"[^\"]*\")?>([^<]*)</th>", text)
  assert headers and all(title for title, _ in headers), [h for t, h in headers if not t]
  glossary = text.split('id="glossary"')[1]
  for _, name in headers:
    assert f"<dt>{name}</dt><dd>" in glossary
  for term in ("filter mean", "filter capture", "kl_pq", "net share"):
    assert f"<dt>{html.escape(term)}</dt><dd>" in glossary
  assert "oracle filter&#x27;s gain the predictor recovers" in glossary
  assert "filter capture = (filter mean - mean of all nodes) / (oracle kept mean" in text   # visible note
  assert page.GLOSSARY["filter capture"].startswith("(filter mean - mean of all nodes)")
