"""The tiny PPO budget shared by the tests of PPO's variants (recurrent, blocked moves): 8
envs x 8 steps per update, 2 updates in one chunk, a 1x16 network, 4 evaluation episodes;
and a runner for the tests that must train in a fresh process (XLA flags, host devices)."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

TINY_PPO = (
    "train.num_envs=8",
    "train.num_steps=8",
    "train.total_timesteps=128",  # 2 updates
    "train.update_epochs=1",
    "train.num_minibatches=2",
    "network.hidden=16",
    "network.layers=1",
    "eval.episodes=4",
    "train.updates_per_call=2",
    "train.target_success=null",
)

# A world of random layouts at n = 2 (16 of them), short episodes.
TINY_WORLD = ("env.scenario=null", "env.pool_size=16", "env.max_steps=30")
TINY_GRU = ("network.recurrent=true", "network.gru_hidden=16")


def train_tiny_recurrent_run(root):
    """A tiny recurrent IPPO run at n = 2 with one seed, saved as ``root / "rnn"``: returns
    ``(config, summary, run folder)``. Several test modules read such a run; the session
    fixture ``tiny_recurrent_run`` (tests/conftest.py) trains it once per test process."""
    from cube_jax.rl import config as C
    from cube_jax.rl import run

    cfg = C.build("ippo", overrides=list(TINY_PPO + TINY_WORLD + TINY_GRU) + [
        "env.n=2", "num_seeds=1", f"output.root={root}", "output.name=rnn", "output.gif=false", "output.plot=false"])
    return cfg, run.train_and_report(cfg), root / "rnn"


def json_from_script(script: str, xla_flags: str) -> dict:
    """Runs ``python -c script`` from the repository on the CPU with ``XLA_FLAGS=xla_flags``
    (set before JAX starts, which only a fresh process allows) and returns the JSON object
    the script printed on its last line."""
    env = dict(os.environ, XLA_FLAGS=xla_flags.strip(), JAX_PLATFORMS="cpu")
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, cwd=REPO,
                          timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])
