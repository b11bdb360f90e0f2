"""The package as a user gets it: installed from its folder into a fresh
virtual environment, the README's example run against a real server; its
models what the served specification makes; and `mypy --strict` clean on
the package, its tests and its examples."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import venv
from pathlib import Path

from server import start_server

HERE = Path(__file__).resolve().parents[1]


def test_the_models_match_the_served_specification() -> None:
    checked = subprocess.run(
        [sys.executable, str(HERE / "scripts" / "generate_models.py"), "--check"], capture_output=True, text=True
    )
    assert checked.returncode == 0, checked.stderr


def test_mypy_strict_passes_on_the_package_its_tests_and_its_examples() -> None:
    checked = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "src", "tests", "examples", "scripts"],
        cwd=HERE,
        capture_output=True,
        text=True,
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_installed_from_its_folder_the_readme_example_runs(tmp_path: Path) -> None:
    server = start_server()
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    # From a copy, so that the build leaves nothing in the repository.
    copy = tmp_path / "python"
    shutil.copytree(HERE, copy, ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__", ".*_cache"))
    installed = subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(copy)], capture_output=True, text=True
    )
    assert installed.returncode == 0, installed.stderr
    readme = (HERE / "README.md").read_text()
    example = re.search(r"```python\n(.*?)```", readme, re.S)
    assert example, "the README has a Python example"
    script = tmp_path / "example.py"
    script.write_text(example.group(1))
    ran = subprocess.run(
        [str(python), str(script)],
        env={**os.environ, "ONEJOB_URL": server.url, "ONEJOB_TOKEN": server.token},
        capture_output=True,
        text=True,
        cwd=tmp_path,
    )
    server.stop()
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "succeeded" in ran.stdout, ran.stdout
