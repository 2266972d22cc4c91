"""The type check of shepherd/ (mypy, configured in mypy.ini) is part of the test run, so CI keeps it clean."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.e2e  # starts another process
def test_mypy_finds_no_type_errors_in_shepherd():
    result = subprocess.run([sys.executable, "-m", "mypy", "--config-file", str(ROOT / "mypy.ini")], cwd=ROOT,
                            capture_output=True, text=True, timeout=280)
    assert result.returncode == 0, result.stdout + result.stderr
