"""``bench run``'s batched play: a team whose members all have a batched JAX form plays all
its episodes of a task at once, in one vmapped, jitted rollout recorded step by step."""
from __future__ import annotations

import dataclasses
import math
import sys
from typing import Any, Dict, List, Optional, Sequence, Tuple

import jax
import jax.numpy as jnp
import numpy as np

from cube_jax.bench import entry as entries
from cube_jax.core import suite
from cube_jax.registry import Member

STOCHASTIC_KINDS = ("random",)


class BenchError(ValueError):
    """Bad input to ``bench run``: the message names the task, agent or option."""


@dataclasses.dataclass
class TaskResult:
    """A task's played episodes: records (layout, seed, mode, run and extras) and their actions."""

    episodes: List[Dict[str, Any]]
    actions: List[np.ndarray]  # int8[T_i, N] each, the played steps only
    planned: int
    # a learner's training wall over its seeds, each run's own count across every resume of it
    training_seconds: Optional[float] = None


def test_indices(t: suite.Task, episodes: int) -> Tuple[np.ndarray, np.ndarray]:
    """``(layout index, episode seed)`` int[episodes] each: episode ``i`` plays test layout ``i``
    (layout 0 of a fixed-layout task) with seed ``i``."""
    seeds = np.arange(episodes)
    return (np.zeros_like(seeds) if t.fixed_layout else seeds), seeds


def modes_of(policy, members: Sequence[Member]) -> Tuple[str, ...]:
    """How a batched team is scored: greedy and sampled when its action choice can be either
    (a trained policy), sampled alone when it is random, greedy alone when deterministic."""
    if hasattr(policy, "states"):
        return entries.MODES
    if any(m.kind in STOCHASTIC_KINDS for m in members):
        return ("sampled",)
    return ("greedy",)


def _policy_states(policy, keys: jax.Array, mode: str):
    if hasattr(policy, "states"):
        return policy.states(keys, jnp.full((keys.shape[0],), mode == "greedy"))
    return jax.vmap(policy.init)(keys)


def play_batched(t: suite.Task, env, policy, mode: str, layout_index: np.ndarray, seeds: np.ndarray,
                 progress: bool = True) -> np.ndarray:
    """Every episode at once (layout ``layout_index[i]``, seed ``seeds[i]``), in jitted chunks of
    steps until all have ended: int8[E, T, N] actions, -1 after each episode's end."""
    from tqdm import tqdm

    layouts = jax.tree.map(lambda x: jnp.asarray(np.asarray(x)[layout_index]), suite.test_set(t))
    keys = jax.vmap(jax.random.PRNGKey)(jnp.asarray(seeds, jnp.uint32))
    states, _ = jax.vmap(env.reset_to)(layouts, keys)
    policy_states = _policy_states(policy, jax.vmap(lambda k: jax.random.fold_in(k, 1))(keys), mode)
    chunk = max(1, math.ceil(env.max_steps / 20))

    def one(state, policy_state, done):
        actions, new_policy_state = policy.act(state, policy_state)
        new_state, ts = env.step(state, actions)
        keep = lambda new, old: jnp.where(done, old, new)  # noqa: E731 - an ended episode stays as it is
        recorded = jnp.where(done, entries.NO_ACTION, actions).astype(jnp.int8)
        return (jax.tree.map(keep, new_state, state), jax.tree.map(keep, new_policy_state, policy_state),
                done | ts.terminated | ts.truncated, recorded)

    def steps(carry, _):
        *carry, recorded = jax.vmap(one)(*carry)
        return tuple(carry), recorded

    run = jax.jit(lambda carry: jax.lax.scan(steps, carry, None, length=chunk))
    carry = (states, policy_states, jnp.zeros((len(seeds),), bool))
    recorded = []
    with tqdm(total=env.max_steps, unit="step", desc=f"{t.name} {mode}", disable=not progress,
              file=sys.stderr, leave=False) as bar:
        while len(recorded) * chunk < env.max_steps:
            carry, actions = run(carry)
            recorded.append(np.asarray(actions))
            done = np.asarray(carry[2])
            bar.update(chunk)
            bar.set_postfix(ended=f"{int(done.sum())}/{len(seeds)}")
            if done.all():
                break
    return np.swapaxes(np.concatenate(recorded, axis=0), 0, 1)[:, : env.max_steps]


def trim(actions: np.ndarray) -> List[np.ndarray]:
    """Each episode's played steps of int8[E, T, N] (-1 after the end)."""
    played = (actions[:, :, 0] >= 0).sum(axis=1)
    return [actions[i, : played[i]] for i in range(actions.shape[0])]


def play_team(t: suite.Task, members: Sequence[Member], episodes: int, progress: bool = True,
              run: int = 0) -> TaskResult:
    """A batched team's test episodes of ``t``, in each of its modes (:func:`modes_of`)."""
    from cube_jax.teams import TeamSpecError, batched_team

    env = t.make()
    try:
        policy = batched_team(env, members)
    except TeamSpecError as err:
        raise BenchError(f"task {t.name!r}: {err}") from None
    layout_index, seeds = test_indices(t, episodes)
    records, actions = [], []
    for mode in modes_of(policy, members):
        actions += trim(play_batched(t, env, policy, mode, layout_index, seeds, progress))
        records += [{"layout": int(li), "seed": int(s), "mode": mode, "run": run} for li, s in zip(layout_index, seeds)]
    return TaskResult(records, actions, episodes)
