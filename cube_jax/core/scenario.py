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
from pathlib import Path
from typing import List, Optional, Sequence, Tuple, Union

import yaml

BLOCK_LETTERS = string.ascii_lowercase + string.ascii_uppercase
AGENT_DIGITS = string.digits
EMPTY_CELLS = ".:"
NAMED_SCENARIO_DIR = Path(__file__).parent / "scenarios"


@dataclasses.dataclass(frozen=True)
class Scenario:
    """An exact starting layout.

    ``agents`` are ``(row, col)`` with index = agent id; ``blocks`` are
    ``(row, col, weight)`` of each block's top-left cell with index = block id.
    Construction validates the layout and raises ``ValueError`` saying what is wrong
    and where.
    """

    grid_size: int
    agents: Tuple[Tuple[int, int], ...]
    blocks: Tuple[Tuple[int, int, int], ...]
    max_steps: int = 100
    step_cost: float = 0.01
    deliver_reward: float = 1.0
    name: str = "custom"

    def __post_init__(self):
        where = f"scenario {self.name!r}"
        try:
            agents = tuple((int(r), int(c)) for r, c in self.agents)
        except (TypeError, ValueError):
            raise ValueError(f"{where}: agents must be a list of (row, col) pairs, got {self.agents!r}") from None
        try:
            blocks = tuple((int(r), int(c), int(w)) for r, c, w in self.blocks)
        except (TypeError, ValueError):
            raise ValueError(
                f"{where}: blocks must be a list of (row, col, weight) triples, got {self.blocks!r}"
            ) from None
        object.__setattr__(self, "agents", agents)
        object.__setattr__(self, "blocks", blocks)
        validate_layout(self.grid_size, agents, blocks, where=where)
        if not isinstance(self.max_steps, int) or self.max_steps < 1:
            raise ValueError(f"{where}: max_steps must be a positive integer, got {self.max_steps!r}")
        for field in ("step_cost", "deliver_reward"):
            value = getattr(self, field)
            if not isinstance(value, (int, float)) or value != value:
                raise ValueError(f"{where}: {field} must be a number, got {value!r}")

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
        grid_size, agents, blocks = parse_ascii(text, where=f"scenario {options.get('name', 'custom')!r} map")
        return cls(grid_size=grid_size, agents=agents, blocks=blocks, **options)

    @classmethod
    def from_dict(cls, data: dict, where: str = "scenario") -> "Scenario":
        if not isinstance(data, dict):
            raise ValueError(f"{where}: expected a mapping of scenario fields, got {type(data).__name__}")
        allowed = {"name", "grid_size", "max_steps", "step_cost", "deliver_reward", "agents", "blocks", "map"}
        unknown = sorted(set(data) - allowed)
        if unknown:
            raise ValueError(f"{where}: unknown field(s) {unknown}; allowed: {sorted(allowed)}")
        options = {key: data[key] for key in ("name", "max_steps", "step_cost", "deliver_reward") if key in data}
        options.setdefault("name", where)
        if "map" in data:
            if "agents" in data or "blocks" in data:
                raise ValueError(f"{where}: give either 'map' or 'agents'/'blocks', not both")
            scenario = cls.from_ascii(str(data["map"]), **options)
            if "grid_size" in data and data["grid_size"] != scenario.grid_size:
                raise ValueError(
                    f"{where}: grid_size {data['grid_size']} does not match the {scenario.grid_size}x"
                    f"{scenario.grid_size} map"
                )
            return scenario
        for key in ("grid_size", "agents", "blocks"):
            if key not in data:
                raise ValueError(f"{where}: missing field {key!r}")
        return cls(grid_size=data["grid_size"], agents=data["agents"], blocks=data["blocks"], **options)

    @classmethod
    def from_yaml(cls, path: Union[str, os.PathLike]) -> "Scenario":
        path = Path(path)
        try:
            data = yaml.safe_load(path.read_text())
        except yaml.YAMLError as err:
            raise ValueError(f"{path}: not valid YAML: {err}") from None
        return cls.from_dict(data, where=str(path))

    def to_yaml(self, path: Union[str, os.PathLike, None] = None) -> str:
        text = yaml.safe_dump(self.to_dict(), sort_keys=False, default_flow_style=None)
        if path is not None:
            Path(path).write_text(text)
        return text


def validate_layout(grid_size, agents: Sequence, blocks: Sequence, where: str = "scenario") -> None:
    """Raises ValueError unless the layout keeps every invariant of DYNAMICS.md."""
    if not isinstance(grid_size, int) or isinstance(grid_size, bool) or grid_size < 2:
        raise ValueError(f"{where}: grid_size must be an integer >= 2, got {grid_size!r}")
    k = grid_size
    if len(agents) < 1:
        raise ValueError(f"{where}: needs at least one agent")
    if len(blocks) < 1:
        raise ValueError(f"{where}: needs at least one block")
    owner = {}
    for i, (r, c) in enumerate(agents):
        if not (0 <= r < k and 0 <= c < k):
            raise ValueError(f"{where}: agent {i} at ({r}, {c}) is outside the {k}x{k} grid")
        if (r, c) in owner:
            raise ValueError(f"{where}: agent {i} at ({r}, {c}) overlaps {owner[(r, c)]}")
        owner[(r, c)] = f"agent {i}"
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
        for rr in range(r, r + w):
            for cc in range(c, c + w):
                if (rr, cc) in owner:
                    raise ValueError(f"{where}: block {j} at ({r}, {c}) covers cell ({rr}, {cc}) of {owner[(rr, cc)]}")
                owner[(rr, cc)] = f"block {j}"


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
    lines = [line.strip() for line in text.strip("\n").splitlines()]
    lines = [line for line in lines if line and not line.startswith("#")]
    if not lines:
        raise ValueError(f"{where}: the map is empty")
    k = len(lines)
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
    else:
        text = str(spec)
        named = NAMED_SCENARIO_DIR / f"{text}.yaml"
        if named.exists():
            scenario = Scenario.from_yaml(named)
        elif text.endswith((".yaml", ".yml")):
            if not Path(text).exists():
                raise ValueError(f"scenario file {text!r} does not exist")
            scenario = Scenario.from_yaml(text)
        else:
            raise ValueError(f"unknown scenario {text!r}; named scenarios are {named_scenarios()}, or give a .yaml path")
    if num_agents is not None:
        if not 1 <= num_agents <= len(scenario.agents):
            raise ValueError(
                f"scenario {scenario.name!r}: num_agents={num_agents} but it places {len(scenario.agents)} agents"
            )
        scenario = dataclasses.replace(scenario, agents=scenario.agents[:num_agents])
    return scenario
