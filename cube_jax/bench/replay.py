"""Scores by replay: the world is a deterministic function of its layout and the actions taken,
so every score of an entry is recomputed here from the recorded actions alone, through the JAX
step (BENCH.md sections 2 and 4). ``bench run`` scores its episodes this way and ``bench
verify`` recomputes them the same way.

An episode's recorded actions are int8[T, N] with -1 after its end. Replaying it from test
layout ``layout`` with episode seed ``seed`` gives:

* ``success``: every block delivered before the episode's end;
* ``blocks``: the fraction of blocks delivered (delivered / total, in float64);
* ``steps``: steps to the end (the step that delivered the last block, or the task's limit);
* ``return``: the team mean (float64) of each agent's summed papers' reward (float32 sums, as
  the step gives them);

and two checks of the evidence itself: ``acted_after_end`` (an action recorded after the
episode ended) and ``ended`` (the recorded steps reach the episode's end).
"""
from __future__ import annotations

import functools
from typing import Dict

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.core import suite
from cube_jax.core.layouts import Layout


@functools.lru_cache(maxsize=None)
def scoring_env(name: str):
    """The task's world under the papers' reward, as every score is computed."""
    return suite.task(name).make()


@functools.partial(jax.jit, static_argnums=(0,))
def _replay(name: str, layouts: Layout, seeds: jax.Array, actions: jax.Array) -> Dict[str, jax.Array]:
    env = scoring_env(name)
    keys = jax.vmap(jax.random.PRNGKey)(seeds)
    states, _ = jax.vmap(env.reset_to)(layouts, keys)
    episodes = seeds.shape[0]
    start = {
        "state": states,
        "done": jnp.zeros((episodes,), bool),
        "terminated": jnp.zeros((episodes,), bool),
        "steps": jnp.zeros((episodes,), jnp.int32),
        "reward": jnp.zeros((episodes, env.num_agents), jnp.float32),
        "acted_after_end": jnp.zeros((episodes,), bool),
    }

    def one_step(carry, step_actions):  # step_actions int8[E, N]
        recorded = step_actions >= 0
        live = ~carry["done"] & jnp.all(recorded, axis=1)
        state, ts = jax.vmap(env.step)(carry["state"], jnp.maximum(step_actions, 0).astype(jnp.int32))
        keep = lambda new, old: jnp.where(live.reshape(live.shape + (1,) * (new.ndim - 1)), new, old)  # noqa: E731
        return {
            "state": jax.tree.map(keep, state, carry["state"]),
            "done": carry["done"] | (live & (ts.terminated | ts.truncated)),
            "terminated": carry["terminated"] | (live & ts.terminated),
            "steps": carry["steps"] + live.astype(jnp.int32),
            "reward": carry["reward"] + jnp.where(live[:, None], ts.reward, 0.0),
            # an action after the end, or a partly recorded step
            "acted_after_end": carry["acted_after_end"] | (carry["done"] & jnp.any(recorded, axis=1))
                               | (jnp.any(recorded, axis=1) & ~jnp.all(recorded, axis=1)),
        }, None

    end, _ = jax.lax.scan(one_step, start, jnp.swapaxes(actions, 0, 1))
    alive = end["state"].block_alive
    return {
        "success": end["terminated"],
        "delivered": jnp.sum(~alive, axis=1),
        "steps": end["steps"],
        "reward": end["reward"],
        "ended": end["done"],
        "acted_after_end": end["acted_after_end"],
    }


def replay(task_name: str, layout_index: np.ndarray, seeds: np.ndarray, actions: np.ndarray) -> Dict[str, np.ndarray]:
    """Replays E episodes of a task: ``layout_index`` int[E] (into the task's test set), ``seeds``
    int[E], ``actions`` int8[E, T, N]; returns host arrays of the scores and checks above."""
    t = suite.task(task_name)
    test = suite.test_set(t)
    index = np.asarray(layout_index, dtype=np.int64)
    layouts = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[index]), test)
    actions = np.asarray(actions, dtype=np.int8)
    if actions.ndim != 3 or actions.shape[0] != index.shape[0] or actions.shape[2] != t.num_agents:
        raise ValueError(f"task {task_name!r}: actions of shape {actions.shape}, expected [{index.shape[0]}, T, "
                         f"{t.num_agents}]")
    if actions.shape[1] > t.max_steps:
        raise ValueError(f"task {task_name!r}: {actions.shape[1]} steps of actions, more than the task's {t.max_steps}")
    # one compiled replay per task and batch size: every episode padded to the task's length
    actions = np.pad(actions, ((0, 0), (0, t.max_steps - actions.shape[1]), (0, 0)), constant_values=-1)
    out = _replay(task_name, layouts, jnp.asarray(np.asarray(seeds, np.uint32)), jnp.asarray(actions))
    return {**{k: np.asarray(v) for k, v in out.items()}, "num_blocks": np.asarray(test.block_weight).shape[1]}


def scores_of(replayed: Dict[str, np.ndarray], i: int) -> Dict[str, object]:
    """Episode ``i``'s scores as an entry records them: ``blocks`` as delivered / total and
    ``return`` as the mean of the agents' float32 sums, both in float64 on the host."""
    blocks = int(replayed["delivered"][i]) / int(replayed["num_blocks"])
    return {"success": bool(replayed["success"][i]), "blocks": blocks, "steps": int(replayed["steps"][i]),
            "return": float(np.mean(np.asarray(replayed["reward"][i], np.float64)))}


def film(task_name: str, layout: int, seed: int, actions: np.ndarray, path) -> None:
    """A GIF of one recorded episode (int8[T, N] actions), replayed from its test layout."""
    from cube_jax.adapters.render import render_rgb, save_gif

    env = scoring_env(task_name)
    lay = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[layout]), suite.test_set(suite.task(task_name)))
    state, _ = env.reset_to(lay, jax.random.PRNGKey(seed))
    frames = [render_rgb(state)]
    for step_actions in np.asarray(actions):
        if step_actions[0] < 0:
            break
        state, _ = env.step(state, np.asarray(step_actions, np.int32))
        frames.append(render_rgb(state))
    save_gif(frames, path)


__all__ = ["film", "replay", "scores_of", "scoring_env"]
