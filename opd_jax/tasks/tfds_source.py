"""Any TFDS dataset as a task: `tfds:<name>`, read by random access from a prepared data_dir.

Needs `tensorflow-datasets` and `array-record` (pip), not tensorflow: the dataset must be prepared in the
`array_record` (or parquet) file format, which `tfds.data_source` reads without tensorflow. Imported lazily,
so the rest of opd_jax does not need tfds. Nothing is downloaded unless `download=True` (which runs the
builder's own download_and_prepare into data_dir in array_record format; some builders need tensorflow for
that step). Prepare offline elsewhere with
  tfds build <name> --data_dir=<dir> --file_format=array_record
and copy <dir> over.

Examples: DeepMind `math_dataset/algebra__linear_1d` (fields question/answer, no solution);
`huggingface:gsm8k/main` with `answer_marker="####", grader="numeric"` (its answer field holds the worked
solution, then `#### <number>`).
"""
from opd_jax.tasks import base
from opd_jax.tasks import files

_INSTALL = "pip install tensorflow-datasets array-record (tensorflow itself is not needed)"


def _field(example: dict, path: str, name: str, available) -> str:
  """example[path] as text; `path` may name a nested feature as "a/b"; bytes are decoded as UTF-8."""
  value = example
  for key in path.split("/"):
    if not isinstance(value, dict) or key not in value:
      raise ValueError(f"tfds:{name}: no feature {path!r}; features: {available}. Pass question_field=, "
                       "answer_field=, solution_field= naming them")
    value = value[key]
  if hasattr(value, "item") and getattr(value, "shape", None) == ():
    value = value.item()  # numpy scalar
  if isinstance(value, bytes):
    return value.decode("utf-8")
  return str(value)


def load(name: str, *, split: str = "test", data_dir=None, download: bool = False,
         num_problems: int | None = None, question_field: str = "question", answer_field: str = "answer",
         solution_field: str | None = None, answer_marker: str | None = None, grader: str = "math",
         template: str | None = None) -> base.Task:
  """A task over a TFDS dataset split.

  Args:
    name: the TFDS name, with config/version if any ("math_dataset/algebra__linear_1d", "huggingface:gsm8k/main").
    split: the TFDS split ("test", "train[:100]").
    data_dir: where the prepared dataset lives (None: TFDS's default, ~/tensorflow_datasets).
    download: download and prepare (array_record) when not prepared; never otherwise.
    num_problems: the first n examples of the split in TFDS's stored order (None: all; read lazily).
    question_field, answer_field, solution_field: feature names ("a/b" for nested features); no solution when
      solution_field is None.
    answer_marker: when set (e.g. "####"), the gold is the answer field's text after the last marker, and the
      text before it is the solution (unless solution_field is given).
    grader: "math" (last `\\boxed{}` + math-verify, as math500) or "numeric" (`answers.extract_number`, exact
      decimal equality, as gsm8k).
    template: the user message with `{question}`; default: that of math500 or gsm8k, after `grader`.
  Returns:
    A Task named "tfds:<name>", ids "<name>-<split>-<index:05d>" (characters outside [A-Za-z0-9_.-] -> "_").
  """
  extractor, grade = files.grading(grader, f"tfds:{name}")   # a bad grader fails before tfds is imported
  template = template or (files.MATH_TEMPLATE if grader == "math" else files.GSM8K_TEMPLATE)
  try:
    import tensorflow_datasets as tfds  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    raise ImportError(f"task 'tfds:{name}' needs tensorflow-datasets: {_INSTALL}") from e

  try:
    builder = tfds.builder(name, data_dir=data_dir, file_format="array_record")
  except tfds.core.registered.DatasetNotFoundError as e:
    raise ValueError(f"tfds:{name}: no such TFDS dataset, and none prepared under data_dir={data_dir!r}") from e
  if not builder.is_prepared():
    if not download:
      raise FileNotFoundError(
          f"tfds:{name} is not prepared under {str(builder.data_dir)!r}; prepare it with `tfds build {name} "
          f"--data_dir=<dir> --file_format=array_record` and pass data_dir=<dir>, or pass download=True")
    builder.download_and_prepare()
  try:
    source = builder.as_data_source(split=split)
  except NotImplementedError as e:
    raise ValueError(f"tfds:{name} under {str(builder.data_dir)!r} is stored as "
                     f"{builder.info.file_format}; random access needs array_record or parquet: rebuild with "
                     "--file_format=array_record into another data_dir") from e

  indices = base.limit(range(len(source)), num_problems, f"tfds:{name} split {split!r}")
  available = sorted(builder.info.features.keys())
  problems = []
  for index in indices:
    example = source[index]
    answer = _field(example, answer_field, name, available)
    solution = _field(example, solution_field, name, available) if solution_field else None
    if answer_marker is not None:
      if answer_marker not in answer:
        raise ValueError(f"tfds:{name}: example {index} has no {answer_marker!r} in field {answer_field!r}")
      before, answer = answer.rsplit(answer_marker, 1)
      solution = solution if solution_field else before.rstrip()
    problems.append(base.Problem(id=base.safe_id(name, split, f"{index:05d}"),
                                 question=_field(example, question_field, name, available),
                                 answer=answer.strip(), solution=solution, fields={"index": index}))
  return base.Task(name=f"tfds:{name}", problems=problems, template=base.check_template(template),
                   extractor=extractor, grader=grade)
