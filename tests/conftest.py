"""Shared pytest fixtures: where the shared data lives, and skips with a reason when it is absent."""
import os
import pathlib

import pytest

REPO = pathlib.Path(__file__).resolve().parents[1]
SHARED_DATA = pathlib.Path(os.environ.get("OPD_JAX_SHARED_DATA", REPO.parent / "shared" / "data"))


os.environ.setdefault("OPD_JAX_LOOKS_LEDGER", "off")   # no ledger of looks across tests' studies (its own tests
                                                       # set a file: opd_jax/report/looks.py, "Looks the design did not plan")


@pytest.fixture
def shared_data() -> pathlib.Path:
  """../shared/data beside the checkout (GSM8K, MATH-500); skips the test where it is absent."""
  if not SHARED_DATA.is_dir():
    pytest.skip(f"shared data not found at {SHARED_DATA} (set OPD_JAX_SHARED_DATA or clone beside ../shared)")
  return SHARED_DATA
