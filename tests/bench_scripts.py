"""Loading a script of ``benchmarks/`` as a module, for the tests of its functions."""
from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Optional

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(stem: str, name: Optional[str] = None) -> ModuleType:
    """``benchmarks/<stem>.py`` as the module ``name`` (default ``stem``), registered in
    ``sys.modules`` (dataclasses look their module up there); ``benchmarks/`` is put on
    ``sys.path`` first, as the script itself does, for its ``bench_common`` imports."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name or stem, BENCHMARKS / f"{stem}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module
