"""Pictures of one CUBE state: an RGB image, an animated GIF and the ASCII map.

``render_rgb(state)`` draws a caption bar (step and blocks delivered) above the grid:
grid lines, the goal column tinted green, each alive block as a ``w x w`` square coloured
by its weight and labelled ``<id>:<weight>`` (ids are the block letters of the ASCII map,
``a`` = block 0), and each agent as a circle labelled with its id.

>>> import jax, cube_jax
>>> from cube_jax.adapters.render import render_rgb, render_text
>>> env = cube_jax.make("easy")
>>> state, _ = env.reset(jax.random.PRNGKey(0))
>>> render_rgb(state).shape   # (caption + 8 * 24 + 1, 8 * 24 + 1, 3)
(209, 193, 3)
>>> render_text(state) == env.render(state)
True

This module is outside the jitted core: it pulls the state to the host and draws with
Pillow, one state at a time.
"""
from __future__ import annotations

import os
from typing import Sequence, Union

import numpy as np
from PIL import Image, ImageDraw, ImageFont

from cube_jax.core.env import layout
from cube_jax.core.scenario import BLOCK_LETTERS, render_ascii
from cube_jax.core.types import State

BACKGROUND = (255, 255, 255)
GRID_LINE = (190, 190, 190)
GOAL_TINT = (200, 238, 200)
CAPTION_BG = (40, 40, 40)
CAPTION_TEXT = (255, 255, 255)
# Index w-1 colours a block of weight w: light for light blocks, dark for heavy ones, so the
# force a block needs can be read at a glance. Heavier blocks reuse the darkest colour.
BLOCK_COLOURS = (
    (238, 203, 140),
    (214, 150, 70),
    (176, 98, 40),
    (133, 62, 22),
    (96, 40, 16),
    (64, 26, 12),
)
# Agents cycle through distinct hues so that one agent can be followed across GIF frames.
AGENT_COLOURS = (
    (31, 119, 180),
    (214, 39, 40),
    (44, 160, 44),
    (148, 103, 189),
    (255, 127, 14),
    (23, 190, 207),
    (227, 119, 194),
    (127, 127, 127),
    (188, 189, 34),
    (140, 86, 75),
)


def render_rgb(state: State, cell_px: int = 24) -> np.ndarray:
    """uint8[H, W, 3] picture of one (unbatched) state.

    ``W = K * cell_px + 1`` and ``H = caption + K * cell_px + 1`` where the caption bar is
    ``caption_height(cell_px)`` pixels tall.
    """
    if not isinstance(cell_px, (int, np.integer)) or isinstance(cell_px, bool) or cell_px < 8:
        raise ValueError(f"render_rgb: cell_px must be an integer >= 8 (room for a label), got {cell_px!r}")
    lay = layout(state)  # raises a clear error for a batched state
    k = state.grid_size
    top = caption_height(cell_px)
    size = k * cell_px + 1
    image = Image.new("RGB", (size, top + size), BACKGROUND)
    draw = ImageDraw.Draw(image)
    # Hard-edged text keeps a frame to a few dozen colours, which a GIF palette holds exactly.
    draw.fontmode = "1"
    font = ImageFont.load_default(size=_font_size(cell_px))

    _draw_caption(draw, font, lay, size, top)
    draw.rectangle(_cell_box(top, cell_px, 0, k - 1, rows=k, cols=1), fill=GOAL_TINT)
    for i in range(k + 1):
        draw.line([(0, top + i * cell_px), (size - 1, top + i * cell_px)], fill=GRID_LINE)
        draw.line([(i * cell_px, top), (i * cell_px, top + size - 1)], fill=GRID_LINE)
    for j, (r, c, w, alive) in enumerate(lay["blocks"]):
        if alive:
            _draw_block(draw, font, top, cell_px, j, r, c, w)
    for i, (r, c) in enumerate(lay["agents"]):
        _draw_agent(draw, font, top, cell_px, i, r, c)
    return np.asarray(image, dtype=np.uint8)


def caption_height(cell_px: int) -> int:
    """Pixels of the caption bar above the grid for a given cell size."""
    return _font_size(cell_px) + 6


def render_text(state: State) -> str:
    """The ASCII map of one state (the scenario map form; ``CubeEnv.render`` gives the same)."""
    lay = layout(state)
    return render_ascii(state.grid_size, lay["agents"], lay["blocks"])


def save_gif(frames: Sequence[np.ndarray], path: Union[str, os.PathLike], fps: float = 4) -> None:
    """Writes ``frames`` (each uint8[H, W, 3], one shape) as a looping GIF at ``fps``.

    GIF writers fold a frame identical to the one before it into that frame's display time,
    so the file holds fewer frames than given when consecutive frames repeat exactly.
    Frames from ``render_rgb`` never repeat within an episode: the caption shows the step.
    """
    frames = list(frames)
    if not frames:
        raise ValueError("save_gif: no frames to write")
    if not isinstance(fps, (int, float, np.integer, np.floating)) or isinstance(fps, bool) or not fps > 0:
        raise ValueError(f"save_gif: fps must be a positive number, got {fps!r}")
    first = np.asarray(frames[0])
    for i, frame in enumerate(frames):
        frame = np.asarray(frame)
        if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[2] != 3:
            raise ValueError(
                f"save_gif: frame {i} must be uint8[H, W, 3], got {frame.dtype}{list(frame.shape)}"
            )
        if frame.shape != first.shape:
            raise ValueError(f"save_gif: frame {i} has shape {frame.shape}, frame 0 has {first.shape}")
    images = [Image.fromarray(np.asarray(frame)) for frame in frames]
    images[0].save(
        path,
        format="GIF",
        save_all=True,
        append_images=images[1:],
        duration=int(round(1000 / fps)),
        loop=0,
    )


# -- drawing pieces ------------------------------------------------------------------------
def _font_size(cell_px: int) -> int:
    return max(8, int(cell_px * 0.45))


def _cell_box(top: int, cell_px: int, r: int, c: int, rows: int = 1, cols: int = 1):
    """Pixel box (x0, y0, x1, y1) covering ``rows x cols`` cells from cell (r, c), inside grid lines."""
    x0, y0 = c * cell_px + 1, top + r * cell_px + 1
    return (x0, y0, x0 + cols * cell_px - 2, y0 + rows * cell_px - 2)


def _draw_caption(draw: ImageDraw.ImageDraw, font, lay: dict, width: int, height: int) -> None:
    delivered = sum(1 for *_, alive in lay["blocks"] if not alive)
    draw.rectangle((0, 0, width - 1, height - 1), fill=CAPTION_BG)
    text = f"t={lay['t']}  delivered {delivered}/{len(lay['blocks'])}"
    draw.text((3, height // 2), text, fill=CAPTION_TEXT, font=font, anchor="lm")


def _draw_block(draw, font, top: int, cell_px: int, j: int, r: int, c: int, w: int) -> None:
    colour = BLOCK_COLOURS[min(w, len(BLOCK_COLOURS)) - 1]
    box = _cell_box(top, cell_px, r, c, rows=w, cols=w)
    draw.rectangle(box, fill=colour, outline=(0, 0, 0))
    block_id = BLOCK_LETTERS[j] if j < len(BLOCK_LETTERS) else str(j)
    text_colour = (0, 0, 0) if w <= 2 else (255, 255, 255)
    centre = ((box[0] + box[2]) / 2, (box[1] + box[3]) / 2)
    draw.text(centre, f"{block_id}:{w}", fill=text_colour, font=font, anchor="mm")


def _draw_agent(draw, font, top: int, cell_px: int, i: int, r: int, c: int) -> None:
    x0, y0, x1, y1 = _cell_box(top, cell_px, r, c)
    pad = max(1, cell_px // 10)
    draw.ellipse((x0 + pad, y0 + pad, x1 - pad, y1 - pad), fill=AGENT_COLOURS[i % len(AGENT_COLOURS)])
    centre = ((x0 + x1) / 2, (y0 + y1) / 2)
    draw.text(centre, str(i), fill=(255, 255, 255), font=font, anchor="mm")
