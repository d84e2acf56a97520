"""The built-site tests import their helpers (built_pages) from this folder."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))  # pytest runs with --import-mode=importlib
