"""The packages are layers, bottom to top: wire < rewrites < costmodel < lowering < validation <
service.optimizer < service.http < service.client < service.cli. A lower layer never imports a
higher one; import-linter checks the contract in pyproject.toml."""
from __future__ import annotations

import pytest

import subprocess
import sys
from pathlib import Path

pytestmark = pytest.mark.integration  # a real server or subprocess

REPO = Path(__file__).resolve().parent.parent
LINT = Path(sys.executable).parent / "lint-imports"


def _lint(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([str(LINT), "--no-cache", *args], cwd=REPO, capture_output=True, text=True, timeout=300)


def test_no_layer_imports_a_higher_one():
    done = _lint()
    assert done.returncode == 0, done.stdout + done.stderr
    assert "0 broken" in done.stdout and "3 kept" in done.stdout


def test_the_check_catches_an_upward_import(tmp_path):
    inverted = tmp_path / "inverted.toml"  # claims the service sits below the wire format it imports
    inverted.write_text('[tool.importlinter]\nroot_packages = ["wire", "service"]\n\n'
                        '[[tool.importlinter.contracts]]\nname = "inverted"\ntype = "layers"\n'
                        'layers = ["wire", "service"]\n')
    done = _lint("--config", str(inverted))
    assert done.returncode != 0 and "service" in done.stdout and "BROKEN" in done.stdout
