"""Where things live in the project tree. Every module asks here, none guesses."""

from __future__ import annotations

import os
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PATCHES_DIR = ROOT / "patches"
PIN_FILE = PATCHES_DIR / "PIN"
SERIES_FILE = PATCHES_DIR / "series"
DOCKER_DIR = ROOT / "docker"
BUILD_DIR = Path(os.environ.get("HARNESS_BUILD_DIR", ROOT / "build"))
WHEELHOUSE_DIR = BUILD_DIR / "wheelhouse"
WORKSPACE_DIR = BUILD_DIR / "ray-src"
RESULTS_DIR = BUILD_DIR / "results"
VENV_DIR = Path(os.environ.get("HARNESS_VENV", ROOT / ".venv"))
