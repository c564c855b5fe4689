"""Hand-written worlds: the ``Scenario`` type, YAML files and the ASCII map form.

A scenario fixes the exact layout that every reset starts from. It can be written as
Python, as YAML (``configs/scenarios/*.yaml``) or as an ASCII map, one character per
cell, row 0 at the top::

    ........
    0.aa....
    1.aa....
    ...b....

``.`` (or ``:`` on the goal column) is an empty cell; a digit is an agent (its id); a
letter marks the cells of one block, which must form a filled w x w square (its weight is
w). Block ids follow the alphabet (``a`` = 0, ``b`` = 1, ..., ``z`` = 25, ``A`` = 26 ...),
so a map holds at most 10 agents and 52 blocks; larger worlds use the list form.
"""
from __future__ import annotations

import dataclasses
import os
import string
from collections.abc import Mapping
from collections.abc import Sequence as SequenceABC
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import numpy as np
import yaml

from cube_jax.core.checks import MAX_EPISODE_STEPS, MAX_GRID_SIZE, as_int, as_real, clip, excerpt

BLOCK_LETTERS = string.ascii_lowercase + string.ascii_uppercase
AGENT_DIGITS = string.digits
EMPTY_CELLS = ".:"
NAMED_SCENARIO_DIR = Path(__file__).parent / "scenarios"
# A scenario file is small (a 1000 x 1000 map is 1 MB); the limit keeps a stray large file
# from being parsed by the pure-Python YAML reader.
MAX_YAML_BYTES = 2**21
# Scenario documents are at most four levels deep (mapping, list, pair, value).
MAX_YAML_DEPTH = 16


@dataclasses.dataclass(frozen=True)
class Scenario:
    """An exact starting layout.

    ``agents`` are ``(row, col)`` with index = agent id; ``blocks`` are
    ``(row, col, weight)`` of each block's top-left cell with index = block id.
    Construction validates the layout and raises ``ValueError`` saying what is wrong
    and where. Coordinates, weights, ``grid_size`` (2..4096) and ``max_steps``
    (1..2**31 - 2) are integers (Python or NumPy, or integral floats such as ``2.0``;
    never bools); ``step_cost`` and ``deliver_reward`` are finite numbers.
    """

    grid_size: int
    agents: Tuple[Tuple[int, int], ...]
    blocks: Tuple[Tuple[int, int, int], ...]
    max_steps: int = 100
    step_cost: float = 0.01
    deliver_reward: float = 1.0
    name: str = "custom"

    def __post_init__(self):
        if not isinstance(self.name, str):
            raise ValueError(f"scenario name must be a string, got {excerpt(self.name)}")
        where = f"scenario {excerpt(self.name, 60)}"
        grid_size = as_int(self.grid_size, f"{where}: grid_size", 2, MAX_GRID_SIZE, "the largest grid side")
        agents = _integer_tuples(self.agents, 2, "agents", "agent", ("row", "col"), where)
        blocks = _integer_tuples(self.blocks, 3, "blocks", "block", ("row", "col", "weight"), where)
        object.__setattr__(self, "grid_size", grid_size)
        object.__setattr__(self, "agents", agents)
        object.__setattr__(self, "blocks", blocks)
        validate_layout(grid_size, agents, blocks, where=where)
        object.__setattr__(
            self, "max_steps", as_int(self.max_steps, f"{where}: max_steps", 1, MAX_EPISODE_STEPS, "the step counter is int32")
        )
        for field in ("step_cost", "deliver_reward"):
            object.__setattr__(self, field, as_real(getattr(self, field), f"{where}: {field}"))

    # -- conversions ---------------------------------------------------------------------
    def to_ascii(self) -> str:
        return render_ascii(self.grid_size, self.agents, [(r, c, w, True) for r, c, w in self.blocks])

    def to_dict(self) -> dict:
        return {
            "name": self.name,
            "grid_size": self.grid_size,
            "max_steps": self.max_steps,
            "step_cost": self.step_cost,
            "deliver_reward": self.deliver_reward,
            "agents": [list(a) for a in self.agents],
            "blocks": [list(b) for b in self.blocks],
        }

    @classmethod
    def from_ascii(cls, text: str, **options) -> "Scenario":
        grid_size, agents, blocks = parse_ascii(text, where=f"scenario {excerpt(options.get('name', 'custom'), 60)} map")
        return cls(grid_size=grid_size, agents=agents, blocks=blocks, **options)

    @classmethod
    def from_dict(cls, data: dict, where: str = "scenario") -> "Scenario":
        if not isinstance(data, Mapping):
            raise ValueError(f"{where}: expected a mapping of scenario fields, got {type(data).__name__}")
        allowed = {"name", "grid_size", "max_steps", "step_cost", "deliver_reward", "agents", "blocks", "map"}
        unknown = [key for key in data if key not in allowed]
        if unknown:
            shown = ", ".join(excerpt(key, 40) for key in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
            raise ValueError(f"{where}: unknown field(s) [{shown}]; allowed: {sorted(allowed)}")
        options = {key: data[key] for key in ("name", "max_steps", "step_cost", "deliver_reward") if key in data}
        options.setdefault("name", where)
        if "map" in data:
            if "agents" in data or "blocks" in data:
                raise ValueError(f"{where}: give either 'map' or 'agents'/'blocks', not both")
            if not isinstance(data["map"], str):
                raise ValueError(f"{where}: map must be text (one line per grid row), got {excerpt(data['map'])}")
            scenario = cls.from_ascii(data["map"], **options)
            if "grid_size" in data and data["grid_size"] != scenario.grid_size:
                raise ValueError(
                    f"{where}: grid_size {excerpt(data['grid_size'])} does not match the {scenario.grid_size}x"
                    f"{scenario.grid_size} map"
                )
            return scenario
        for key in ("grid_size", "agents", "blocks"):
            if key not in data:
                raise ValueError(f"{where}: missing field {key!r}")
        return cls(grid_size=data["grid_size"], agents=data["agents"], blocks=data["blocks"], **options)

    @classmethod
    def from_yaml(cls, path: Union[str, os.PathLike]) -> "Scenario":
        """A scenario from a YAML file (UTF-8, at most 2 MiB, no aliases); ValueError if unusable."""
        where = _path_excerpt(path)
        data = _read_yaml(path, where)
        try:
            return cls.from_dict(data, where=where)
        except ValueError as err:  # a file that names its scenario: say which file as well
            if where in str(err):
                raise
            raise ValueError(f"{where}: {err}") from None

    def to_yaml(self, path: Union[str, os.PathLike, None] = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)
        if path is not None:
            Path(path).write_text(text)
        return text


def _integer_tuples(items, size: int, field: str, thing: str, parts: Tuple[str, ...], where: str) -> tuple:
    """``items`` (a list of ``size``-tuples of integers) as a tuple of int tuples, or ValueError."""
    form = f"({', '.join(parts)}) {'pairs' if size == 2 else 'triples'}"
    if isinstance(items, (str, bytes, Mapping)) or not isinstance(items, (SequenceABC, np.ndarray)):
        raise ValueError(f"{where}: {field} must be a list of {form}, got {excerpt(items)}")
    out = []
    for i, item in enumerate(items):
        if isinstance(item, (str, bytes, Mapping)) or not isinstance(item, (SequenceABC, np.ndarray)) or len(item) != size:
            raise ValueError(f"{where}: {field} must be a list of {form}; {thing} {i} is {excerpt(item)}")
        values = []
        for part, value in zip(parts, item):
            values.append(as_int(value, f"{where}: {thing} {i} {part}"))
        out.append(tuple(values))
    return tuple(out)


def validate_layout(grid_size, agents: Sequence, blocks: Sequence, where: str = "scenario") -> None:
    """Raises ValueError unless the layout keeps every invariant of DYNAMICS.md."""
    k = as_int(grid_size, f"{where}: grid_size", 2, MAX_GRID_SIZE, "the largest grid side")
    if len(agents) < 1:
        raise ValueError(f"{where}: needs at least one agent")
    if len(blocks) < 1:
        raise ValueError(f"{where}: needs at least one block")
    # owner[r, c]: 0 free, i + 1 agent i, -(j + 1) block j (an array: a big block stays cheap)
    owner = np.zeros((k, k), np.int32)

    def name(code) -> str:
        return f"agent {code - 1}" if code > 0 else f"block {-code - 1}"

    for i, (r, c) in enumerate(agents):
        if not (0 <= r < k and 0 <= c < k):
            raise ValueError(f"{where}: agent {i} at ({r}, {c}) is outside the {k}x{k} grid")
        if owner[r, c]:
            raise ValueError(f"{where}: agent {i} at ({r}, {c}) overlaps {name(owner[r, c])}")
        owner[r, c] = i + 1
    for j, (r, c, w) in enumerate(blocks):
        if w < 1:
            raise ValueError(f"{where}: block {j} at ({r}, {c}) has weight {w}; weights must be >= 1")
        if not (0 <= r and r + w <= k and 0 <= c and c + w <= k):
            raise ValueError(f"{where}: block {j} (weight {w}) at ({r}, {c}) extends outside the {k}x{k} grid")
        if c + w - 1 >= k - 1:
            raise ValueError(
                f"{where}: block {j} (weight {w}) at ({r}, {c}) touches the goal column {k - 1}; "
                "it would count as delivered before the first step"
            )
        square = owner[r : r + w, c : c + w]
        taken = np.argwhere(square)
        if len(taken):
            rr, cc = int(taken[0][0]) + r, int(taken[0][1]) + c
            raise ValueError(f"{where}: block {j} at ({r}, {c}) covers cell ({rr}, {cc}) of {name(owner[rr, cc])}")
        square[...] = -(j + 1)


def render_ascii(grid_size: int, agents: Sequence, blocks: Sequence) -> str:
    """ASCII map of a layout; ``blocks`` are ``(row, col, weight, alive)``."""
    k = grid_size
    cells = [["." if c < k - 1 else ":" for c in range(k)] for _ in range(k)]
    for j, (r, c, w, alive) in enumerate(blocks):
        if not alive:
            continue
        letter = BLOCK_LETTERS[j] if j < len(BLOCK_LETTERS) else "#"
        for rr in range(r, r + w):
            for cc in range(c, c + w):
                cells[rr][cc] = letter
    for i, (r, c) in enumerate(agents):
        cells[r][c] = AGENT_DIGITS[i] if i < len(AGENT_DIGITS) else "@"
    return "\n".join("".join(row) for row in cells)


def parse_ascii(text: str, where: str = "map") -> Tuple[int, List[Tuple[int, int]], List[Tuple[int, int, int]]]:
    """Parses an ASCII map into ``(grid_size, agents, blocks)``; see the module docstring."""
    if not isinstance(text, str):
        raise ValueError(f"{where}: the map must be text (one line per grid row), got {excerpt(text)}")
    lines = [line.strip() for line in text.strip("\n").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise ValueError(f"{where}: the map is empty")
    k = len(lines)
    if k > MAX_GRID_SIZE:
        raise ValueError(f"{where}: the map has {k} rows; grids are at most {MAX_GRID_SIZE} x {MAX_GRID_SIZE}")
    agent_cells, block_cells = {}, {}
    for r, line in enumerate(lines):
        if len(line) != k:
            raise ValueError(f"{where}: row {r} has {len(line)} cells but the map has {k} rows; maps are square")
        for c, ch in enumerate(line):
            if ch in EMPTY_CELLS:
                continue
            if ch in AGENT_DIGITS:
                if ch in agent_cells:
                    raise ValueError(f"{where}: agent {ch} appears twice, at {agent_cells[ch]} and ({r}, {c})")
                agent_cells[ch] = (r, c)
            elif ch in BLOCK_LETTERS:
                block_cells.setdefault(ch, []).append((r, c))
            else:
                raise ValueError(f"{where}: unknown character {ch!r} at ({r}, {c}); use '.', digits or letters")
    ids = sorted(int(ch) for ch in agent_cells)
    if ids != list(range(len(ids))):
        raise ValueError(f"{where}: agent ids must be 0..{len(ids) - 1} without gaps, got {ids}")
    agents = [agent_cells[str(i)] for i in ids]
    letters = sorted(block_cells, key=BLOCK_LETTERS.index)
    expected = list(BLOCK_LETTERS[: len(letters)])
    if letters != expected:
        raise ValueError(f"{where}: block letters must be {''.join(expected)} in order without gaps, got {''.join(letters)}")
    blocks = []
    for letter in letters:
        cells = block_cells[letter]
        r0 = min(r for r, _ in cells)
        c0 = min(c for _, c in cells)
        w = max(r for r, _ in cells) - r0 + 1
        square = {(r0 + dr, c0 + dc) for dr in range(w) for dc in range(w)}
        if set(cells) != square:
            raise ValueError(f"{where}: block {letter!r} at ({r0}, {c0}) is not a filled square")
        blocks.append((r0, c0, w))
    return k, agents, blocks


def named_scenarios() -> List[str]:
    return sorted(p.stem for p in NAMED_SCENARIO_DIR.glob("*.yaml"))


def load_scenario(spec: Union[str, os.PathLike, "Scenario"], num_agents: Optional[int] = None) -> Scenario:
    """A scenario from a Scenario, a built-in name (``"easy"``, ``"hard"``) or a YAML path.

    ``num_agents`` keeps the first agents of the scenario (ids in order).
    """
    if isinstance(spec, Scenario):
        scenario = spec
    elif isinstance(spec, (str, os.PathLike)):
        text = os.fspath(spec)
        if not isinstance(text, str):
            text = os.fsdecode(text)
        if text in named_scenarios():
            scenario = Scenario.from_yaml(NAMED_SCENARIO_DIR / f"{text}.yaml")
        elif text.endswith((".yaml", ".yml")):
            scenario = Scenario.from_yaml(text)
        else:
            raise ValueError(
                f"unknown scenario {excerpt(text)}; named scenarios are {named_scenarios()}, or give a .yaml path"
            )
    else:
        raise ValueError(f"scenario must be a name, a .yaml path or a Scenario, got {excerpt(spec)}")
    if num_agents is not None:
        num_agents = as_int(num_agents, f"scenario {excerpt(scenario.name, 60)}: num_agents", 1)
        if num_agents > len(scenario.agents):
            raise ValueError(
                f"scenario {excerpt(scenario.name, 60)}: num_agents={num_agents} but it places "
                f"{len(scenario.agents)} agents"
            )
        scenario = dataclasses.replace(scenario, agents=scenario.agents[:num_agents])
    return scenario


# --- reading YAML files safely --------------------------------------------------------------


def _path_excerpt(path) -> str:
    """The path as text, shortened to its last 80 characters."""
    try:
        text = os.fsdecode(os.fspath(path))
    except TypeError:
        return excerpt(path)
    return text if len(text) <= 80 else "..." + text[-77:]


class _ScenarioLoader(yaml.SafeLoader):
    """A safe YAML loader that refuses aliases and deep nesting.

    Aliases let a few hundred bytes stand for a structure of billions of nodes; scenario
    files have no use for them.
    """

    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            mark = self.peek_event().start_mark
            raise yaml.composer.ComposerError(None, None, "aliases (*name) are not allowed in scenario files", mark)
        self._depth = getattr(self, "_depth", 0) + 1
        try:
            if self._depth > MAX_YAML_DEPTH:
                mark = self.peek_event().start_mark
                raise yaml.composer.ComposerError(
                    None, None, f"nested deeper than {MAX_YAML_DEPTH} levels", mark
                )
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1


def _read_yaml(path, where: str):
    """The parsed YAML document at ``path``; ValueError (naming the file) for anything unusable."""
    if not isinstance(path, (str, os.PathLike)):
        raise ValueError(f"scenario file: expected a path, got {excerpt(path)}")
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"scenario file {where!r} does not exist") from None
    except (OSError, ValueError) as err:  # ValueError: a NUL byte in the path
        raise ValueError(f"scenario file {where!r} cannot be read: {clip(str(err), 120)}") from None
    if os.path.isdir(path):
        raise ValueError(f"scenario file {where!r} is a folder, not a YAML file")
    if info.st_size > MAX_YAML_BYTES:
        raise ValueError(f"scenario file {where!r} has {info.st_size} bytes; scenario files are at most {MAX_YAML_BYTES}")
    try:
        with open(path, "rb") as f:
            raw = f.read(MAX_YAML_BYTES + 1)
    except OSError as err:
        raise ValueError(f"scenario file {where!r} cannot be read: {clip(err.strerror or str(err), 120)}") from None
    if len(raw) > MAX_YAML_BYTES:
        raise ValueError(f"scenario file {where!r} is larger than {MAX_YAML_BYTES} bytes")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as err:
        line = raw[: err.start].count(b"\n") + 1
        raise ValueError(f"scenario file {where!r} is not UTF-8 text (byte {err.start}, line {line})") from None
    try:
        return yaml.load(text, Loader=_ScenarioLoader)
    except (yaml.YAMLError, ValueError, OverflowError) as err:  # ValueError: e.g. a 5000-digit integer
        raise ValueError(f"{where}: not valid YAML: {clip(str(err), 300)}") from None
    except RecursionError:
        raise ValueError(f"{where}: not valid YAML: nested too deeply") from None
