"""Pictures of a state: the RGB image, the GIF writer and the text map."""
from __future__ import annotations

import doctest

import jax
import numpy as np
import pytest
from PIL import Image

import cube_jax
import cube_jax.adapters.render
from cube_jax.adapters.render import (
    AGENT_COLOURS,
    BACKGROUND,
    BLOCK_COLOURS,
    GOAL_TINT,
    caption_height,
    render_rgb,
    render_text,
    save_gif,
)
from cube_jax.core.scenario import parse_ascii
from cube_jax.core.types import RIGHT, STAY, UP

CELL = 24


@pytest.fixture(scope="module")
def hard():
    """The "hard" world and its first state: agents 0, 1, 2 and blocks of weight 3, 2, 1."""
    env = cube_jax.make("hard")
    state, _ = env.reset(jax.random.PRNGKey(0))
    return env, state


def pixel_of_cell(image: np.ndarray, r: int, c: int, dx: int = 0, dy: int = 0, cell_px: int = CELL) -> tuple:
    """RGB at an offset from the centre of cell (r, c)."""
    y = caption_height(cell_px) + r * cell_px + cell_px // 2 + dy
    x = c * cell_px + cell_px // 2 + dx
    return tuple(int(v) for v in image[y, x])


def test_image_shape_and_dtype(hard):
    _, state = hard
    image = render_rgb(state)
    assert image.dtype == np.uint8
    assert image.shape == (caption_height(CELL) + 8 * CELL + 1, 8 * CELL + 1, 3)
    assert render_rgb(state, cell_px=10).shape == (caption_height(10) + 81, 81, 3)


def test_agents_blocks_goal_and_empty_cells_have_their_colours(hard):
    _, state = hard
    image = render_rgb(state)
    lay = cube_jax.layout(state)
    for i, (r, c) in enumerate(lay["agents"]):
        # Just left of the centre: inside the circle, beside the id drawn on it.
        assert pixel_of_cell(image, r, c, dx=-5) == AGENT_COLOURS[i]
    for r, c, w, _ in lay["blocks"]:
        # A corner cell of the square, away from the label in the middle.
        assert pixel_of_cell(image, r, c, dx=-8, dy=-8) == BLOCK_COLOURS[w - 1]
    assert pixel_of_cell(image, 7, 0) == BACKGROUND  # "hard" leaves row 7 empty
    assert pixel_of_cell(image, 7, 7) == GOAL_TINT
    assert len({BACKGROUND, GOAL_TINT, *BLOCK_COLOURS[:3], *AGENT_COLOURS[:3]}) == 8


def test_delivered_blocks_are_not_drawn(hard):
    _, state = hard
    r, c, w, _ = cube_jax.layout(state)["blocks"][1]
    delivered = state.replace(block_alive=np.array([True, False, True]))
    assert pixel_of_cell(render_rgb(state), r, c, dx=-8, dy=-8) == BLOCK_COLOURS[w - 1]
    assert pixel_of_cell(render_rgb(delivered), r, c, dx=-8, dy=-8) == BACKGROUND


def test_bad_input_is_refused(hard):
    _, state = hard
    with pytest.raises(ValueError, match="cell_px must be an integer >= 8"):
        render_rgb(state, cell_px=4)
    batched = jax.tree.map(lambda x: np.stack([x, x]), state)
    with pytest.raises(ValueError, match="one environment's state"):
        render_rgb(batched)


def test_text_is_the_ascii_map(hard):
    env, state = hard
    text = render_text(state)
    assert text == env.render(state)
    grid_size, agents, blocks = parse_ascii(text)
    lay = cube_jax.layout(state)
    assert grid_size == 8
    assert agents == lay["agents"]
    assert blocks == [(r, c, w) for r, c, w, _ in lay["blocks"]]


def episode_frames(env, state, actions) -> list:
    frames = [render_rgb(state)]
    for a in actions:
        state, _ = env.step(state, np.asarray(a, np.int32))
        frames.append(render_rgb(state))
    return frames


def test_gif_holds_every_frame_of_an_episode(hard, tmp_path):
    env, state = hard
    # Standing still for a step still gives a new frame: the caption shows the step.
    frames = episode_frames(env, state, [(RIGHT, UP, STAY), (STAY, STAY, STAY), (RIGHT, RIGHT, RIGHT)])
    path = tmp_path / "episode.gif"
    save_gif(frames, path, fps=5)
    with Image.open(path) as gif:
        assert gif.format == "GIF" and gif.n_frames == 4
        assert gif.size == (frames[0].shape[1], frames[0].shape[0])
        assert gif.info["duration"] == 200
        gif.seek(3)
        last = np.asarray(gif.convert("RGB"))
    # The palette holds every colour of these pictures, so the last frame comes back exactly.
    np.testing.assert_array_equal(last, frames[3])


def test_gif_folds_repeated_frames_into_display_time(hard, tmp_path):
    _, state = hard
    frame = render_rgb(state)
    other = 255 - frame
    path = tmp_path / "repeat.gif"
    save_gif([frame, frame, other], path, fps=4)
    with Image.open(path) as gif:
        assert gif.n_frames == 2
        assert gif.info["duration"] == 500


@pytest.mark.parametrize(
    "frames, fps, match",
    [
        ([], 4, "no frames"),
        ([np.zeros((4, 4, 3), np.float32)], 4, r"frame 0 must be uint8\[H, W, 3\]"),
        ([np.zeros((4, 4, 3), np.uint8), np.zeros((5, 4, 3), np.uint8)], 4, "frame 1 has shape"),
        ([np.zeros((4, 4, 3), np.uint8)], 0, "fps must be a positive number"),
    ],
)
def test_save_gif_refuses_bad_input(tmp_path, frames, fps, match):
    with pytest.raises(ValueError, match=match):
        save_gif(frames, tmp_path / "bad.gif", fps=fps)


def test_docstring_example_runs():
    assert doctest.testmod(cube_jax.adapters.render).failed == 0
