"""Config files are checked against their job's schema whatever set a field (issue 50, item 2): a typo inside a
config file is one `error:` line with the nearest fields, a syntax error one line with file:line; every config
variant the repository ships passes."""
import json
import os
import pathlib
import subprocess
import sys

import pytest
from ml_collections.config_flags import config_flags as config_flags_lib

from opd_jax import overrides

REPO = pathlib.Path(__file__).resolve().parents[1]
VARIANTS = ["teacher_sweep.py", "teacher_sweep.py:hour", "teacher_sweep.py:gsm", "teacher_sweep.py:paper",
            "teacher_sweep.py:paper_fixed",
            "smoke.py", "context_sweep.py", "cross_tokenizer.py", "validation.py:study", "validation.py:train",
            "validation.py:tiny_study", "validation.py:tiny_train", "opd_train.py", "opd_train.py:smoke",
            "opd_train.py:gpu", "lookahead.py"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_every_shipped_config_passes_its_schema(variant):
  config = config_flags_lib.ConfigFileFlagParser(name="config").parse(str(REPO / "configs" / variant))
  assert overrides.schema_error(config) is None


def test_a_typo_in_a_config_file_and_a_syntax_error_are_one_line_each(tmp_path):
  typo, syntax = tmp_path / "typo.py", tmp_path / "syntax.py"
  typo.write_text("from configs import smoke\ndef get_config(arg=None):\n  config = smoke.get_config()\n"
                  "  config.budget.questoins = 3\n  return config\n")
  syntax.write_text("from configs import smoke\ndef get_config(arg=None):\n  config = smoke.get_config(\n"
                    "  return config\n")
  cases = [{"argv": [f"--config={f}", f"--workdir={tmp_path / f.stem}", "--dry_run"]} for f in (typo, syntax)]
  (tmp_path / "cases.json").write_text(json.dumps(cases))
  subprocess.run([sys.executable, str(REPO / "tests/cli_batch.py"), str(tmp_path / "cases.json"),
                  str(tmp_path / "out.json")], check=True, cwd=REPO, timeout=300,
                 env={"PYTHONPATH": str(REPO), "JAX_PLATFORMS": "cpu", "PATH": "/usr/bin:/bin",
                      **{k: v for k, v in os.environ.items() if k.startswith("OPD_JAX_")}})
  got = json.loads((tmp_path / "out.json").read_text())
  want = ["error: config.budget.questoins: unknown config field", f"error: --config: {syntax}:3: "]
  for g, w in zip(got, want):
    lines = g["stderr"].strip().splitlines()
    assert g["code"] == 2 and len(lines) == 1 and lines[0].startswith(w), g
  assert "did you mean config.budget.questions" in got[0]["stderr"]
  assert not (tmp_path / "typo").exists() and not (tmp_path / "syntax").exists()
