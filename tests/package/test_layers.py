"""The package's layers, checked with import-linter (contracts in pyproject.toml).

The pure-JAX core never imports the symbolic layer, the adapters, agents, RL, LLM or CLI
code, nor their libraries; every other layer imports only the layers below it.
"""
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def test_import_contracts_hold(monkeypatch):
    monkeypatch.chdir(ROOT)
    assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0
