"""The package's layers, checked with import-linter (contracts in pyproject.toml).

The pure-JAX core never imports the symbolic layer, the adapters, agents, RL, LLM or CLI
code, nor their libraries; every other layer imports only the layers below it.
"""
import logging
from pathlib import Path

from importlinter.cli import lint_imports

ROOT = Path(__file__).resolve().parents[2]


def _loggers():
    return {name: lg for name, lg in logging.root.manager.loggerDict.items() if isinstance(lg, logging.Logger)}


def test_import_contracts_hold(monkeypatch):
    # import-linter configures logging with disable_existing_loggers, which would silence the
    # package's loggers for every later test in this process (caplog then records nothing).
    logging.getLogger("cube_jax.rl.run")
    before = {name: lg.disabled for name, lg in _loggers().items()}
    monkeypatch.chdir(ROOT)
    try:
        assert lint_imports(config_filename=str(ROOT / "pyproject.toml"), no_cache=True, no_logo=True) == 0
    finally:
        for name, lg in _loggers().items():
            lg.disabled = before.get(name, False)
    assert not logging.getLogger("cube_jax.rl.run").disabled
