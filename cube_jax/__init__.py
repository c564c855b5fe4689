"""cube_jax: CUBE, the cooperative multi-agent block-pushing world, in JAX.

>>> import jax, cube_jax
>>> env = cube_jax.make(n=4)
>>> state, ts = env.reset(jax.random.PRNGKey(0))
>>> state, ts = env.step(state, jax.numpy.zeros(4, jax.numpy.int32))
>>> ts.reward.shape
(4,)
"""
from cube_jax.core.env import CubeEnv, layout, make
from cube_jax.core.layouts import CountsLayouts, CurriculumLayouts, FixedLayout, Layout, LayoutGenerator, PoolLayouts
from cube_jax.core.observations import OBSERVATION_FORMS, ObservationForm, grid_observation
from cube_jax.core.scenario import Scenario
from cube_jax.core.types import ACTION_NAMES, DOWN, LEFT, NUM_ACTIONS, RIGHT, STAY, UP, EnvConfig, State, StepEvents, TimeStep


def parallel_env(*args, **kwargs):
    """A PettingZoo ``ParallelEnv`` over this world; same options as :func:`make`."""
    from cube_jax.adapters.pettingzoo import CubeParallelEnv

    return CubeParallelEnv(*args, **kwargs)


__all__ = [
    "ACTION_NAMES",
    "CountsLayouts",
    "CubeEnv",
    "CurriculumLayouts",
    "DOWN",
    "EnvConfig",
    "FixedLayout",
    "LEFT",
    "Layout",
    "LayoutGenerator",
    "NUM_ACTIONS",
    "OBSERVATION_FORMS",
    "ObservationForm",
    "PoolLayouts",
    "RIGHT",
    "STAY",
    "Scenario",
    "State",
    "StepEvents",
    "TimeStep",
    "UP",
    "grid_observation",
    "layout",
    "make",
    "parallel_env",
]
__version__ = "0.1.0"
