"""A tiny TFDS dataset built offline into a data_dir in array_record format (for the `tfds:` task tests).

Import only after `tensorflow_datasets` imported (the test skips otherwise). Defining the builder class
registers its name with TFDS once per process.
"""
import numpy as np
import tensorflow_datasets as tfds

NAME = "opd_jax_tiny_qa"
# (question, answer, solution); the "gsm" field holds GSM8K-style "solution #### answer" text.
ROWS = {
    "train": [("What is 2+3?", "5", "2+3=5"), ("What is 7*6?", "42", "7*6=42"), ("Half of 9?", "\\frac{9}{2}", "9/2")],
    "test": [("What is 10-4?", "6", "10-4=6"), ("What is 1000*1?", "1000", "1000*1=1000")],
}


class OpdJaxTinyQa(tfds.core.GeneratorBasedBuilder):
  """Question/answer/solution text rows, plus a GSM8K-style combined field."""
  VERSION = tfds.core.Version("1.0.0")

  def _info(self):
    text = tfds.features.Text()
    return tfds.core.DatasetInfo(builder=self, features=tfds.features.FeaturesDict(
        {"question": text, "answer": text, "solution": text, "gsm": text, "meta": {"level": tfds.features.Scalar(
            dtype=np.int32)}}))

  def _split_generators(self, dl_manager):
    del dl_manager
    return {split: self._generate_examples(rows) for split, rows in ROWS.items()}

  def _generate_examples(self, rows):
    for i, (question, answer, solution) in enumerate(rows):
      yield i, {"question": question, "answer": answer, "solution": solution,
                "gsm": f"<<{solution}>>\n#### {answer}", "meta": {"level": i}}


def build(data_dir: str) -> str:
  """Prepares the dataset under data_dir (array_record) and returns its name."""
  tfds.disable_progress_bar()
  OpdJaxTinyQa(data_dir=data_dir, file_format="array_record").download_and_prepare()
  return NAME
