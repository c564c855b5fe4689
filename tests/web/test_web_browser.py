"""The browser app in a real browser: headless Chromium (Debian's ``chromium``) driven by
Playwright. The page draws the world, a key press moves the person's agent and the server
agrees, a replay reaches its last step, a malformed message gets an error reply, and a
closed tab ends the episode. At 1280x800 the play form, the person's turn and the refusal
reasons are in view while playing with keys, the status line says what the episode is doing
(waiting for the person, ended), the replay's timeline enlarges on a click and the trace
list marks the open trace. Screenshots (of the window as a person sees it) go to
``tests/artifacts/``.

The ``chromium`` fixture (``tests/conftest.py``) installs Debian's Chromium with apt-get
when it is missing; where that cannot be done these tests fail with the reason, they do not skip.
"""
from __future__ import annotations

from pathlib import Path

import pytest

import cube_jax
from cube_jax.agents import heuristic_team
from cube_jax.runtime import run_episode
from cube_jax.trace import read_trace, validate_trace
from cube_jax.web.game import Settings
from cube_jax.web.server import BackgroundServer, create_app
from cube_jax.testing.web import state, until

ARTIFACTS = Path(__file__).resolve().parents[1] / "artifacts"
VIEWPORT = {"width": 1280, "height": 800}


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """``easy``: a person at agent_0 beside a heuristic agent; a recorded heuristic episode to replay."""
    recorded = tmp_path_factory.mktemp("recorded")
    env = cube_jax.make("easy")
    run_episode(env, heuristic_team(env), seed=0, trace=recorded / "heuristic.jsonl")
    app = create_app(env, Settings(world={"scenario": "easy"}, team="human,heuristic",
                                   out=tmp_path_factory.mktemp("run"), speed=None), replays=[recorded])
    with BackgroundServer(app) as running:
        running.recorded = recorded / "heuristic.jsonl"
        yield running


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.errors = []
    page.on("pageerror", lambda err: page.errors.append(str(err)))
    page.on("console", lambda m: page.errors.append(m.text) if m.type == "error" else None)
    yield page
    context.close()


def shot(page, name: str) -> Path:
    """The window as a person sees it, unscrolled (not the full page)."""
    ARTIFACTS.mkdir(exist_ok=True)
    path = ARTIFACTS / name
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(path))
    return path


def in_view(page, selector: str) -> bool:
    """Whether the element is wholly inside the unscrolled window."""
    box = page.locator(selector).bounding_box()
    return box is not None and box["y"] >= 0 and box["y"] + box["height"] <= VIEWPORT["height"] \
        and box["x"] + box["width"] <= VIEWPORT["width"]


def pixel(page, row: int, col: int, grid: int):
    """The canvas colour at the centre-left of cell (row, col) as [r, g, b]."""
    return page.evaluate("""([row, col, grid]) => {
        const canvas = document.getElementById('grid');
        const cell = canvas.width / grid;
        const data = canvas.getContext('2d').getImageData(Math.floor((col + 0.2) * cell), Math.floor((row + 0.5) * cell), 1, 1).data;
        return [data[0], data[1], data[2]];
    }""", [row, col, grid])


def test_the_page_loads_and_draws_the_world(server, page):
    page.goto(server.url + "/")
    drawn = until(lambda: page.evaluate("window.cube.drawn()"), what="the first drawing")
    assert drawn["grid"] == 8 and len(drawn["agents"]) == 2 and len(drawn["blocks"]) == 3
    # the goal column (K - 1) is tinted, a block cell is brown, an empty cell white
    assert pixel(page, 0, 7, 8) == [218, 251, 225]
    r, c, w, alive = drawn["blocks"][0]
    assert alive and pixel(page, r, c, 8) == [216, 195, 160]  # weight 1
    assert pixel(page, 7, 0, 8) == [255, 255, 255] or drawn["agents"][1] == [7, 0]
    cards = page.locator("#agents article")
    assert cards.count() == 2
    assert "agent_0" in cards.nth(0).inner_text() and "human" in cards.nth(0).inner_text()
    assert "heuristic" in cards.nth(1).inner_text()
    assert page.locator("#connection").inner_text() == "connected"
    assert "scenario easy" in page.locator("#summary").inner_text()
    assert shot(page, "live.png").stat().st_size > 10_000
    assert page.errors == []


def test_a_key_press_moves_the_persons_agent_and_the_server_agrees(server, page):
    page.goto(server.url + "/?play=agent_0")
    until(lambda: page.evaluate("window.cube.app.mine.includes('agent_0')"), what="the seat")
    before = state(server)["game"]["id"]
    page.click("#new-episode")  # a fresh episode, whatever the other tests did
    until(lambda: state(server)["game"]["id"] > before and state(server)["t"] == 0 and
          [t for t in state(server)["turns"] if t["agent"] == "agent_0"], what="agent_0's first turn")
    game = state(server)["game"]["id"]
    until(lambda: page.evaluate("window.cube.app.live.game.id") == game, what="the page to follow")
    until(lambda: page.evaluate("window.cube.drawn()?.agents[0]") == [2, 0], what="the start")
    until(lambda: "your turn" in page.locator("#turn").inner_text(), what="the turn shown")
    # the game waits for the person, and says so
    until(lambda: "waiting for the person at agent_0" in page.locator("#status").inner_text(), what="the waiting status")
    assert "running at" not in page.locator("#status").inner_text()
    page.keyboard.press("ArrowRight")
    until(lambda: page.evaluate("window.cube.drawn()?.agents[0]") == [2, 1], what="the redrawn move")
    until(lambda: state(server)["layout"]["agents"][0] == [2, 1], what="the server's state")
    moves = page.evaluate("window.cube.metrics().moves")
    assert len(moves) == 1 and moves[0]["key"] == "right" and moves[0]["ms"] > 0
    for expected in ([1, 1], [0, 1]):  # w moves up as the arrow does
        page.keyboard.press("w")
        until(lambda: page.evaluate("window.cube.drawn()?.agents[0]") == expected, what=f"the move to {expected}")
    page.keyboard.press("ArrowUp")  # into the wall: refused, the reason shown, nothing moves
    until(lambda: "wall" in page.locator("#play-error").inner_text(), what="the refusal")
    assert "agent_0 at (0, 1) cannot move up: that is the wall" in page.locator("#play-error").inner_text()
    # while playing with keys, the form, the turn and the refusal are in view without scrolling
    for selector in ("#turn", "#play-error", "#plan-form", "#send-plan", "#status", "#grid"):
        assert in_view(page, selector), selector
    shot(page, "play-refused.png")
    page.fill("#plan-text", "push_block(7, 2)")  # a typed plan with a block that does not exist
    page.click("#send-plan")
    until(lambda: "block 7" in page.locator("#play-error").inner_text(), what="the plan's refusal")
    page.fill("#plan-text", "move(down, 2)")
    page.click("#send-plan")
    until(lambda: state(server)["layout"]["agents"][0] == [2, 1], what="the typed plan's two steps")
    until(lambda: page.evaluate("window.cube.drawn()?.agents[0]") == [2, 1], what="the page to agree")
    assert "move(down, 2)" in page.locator("#agents article").nth(0).inner_text()
    page.locator("#plan-text").fill("")
    shot(page, "play.png")
    assert page.errors == []
    trace = Path(server.app.state.hub.game.trace)
    page.close()  # the person leaves
    result = until(lambda: state(server)["result"], what="the end of the episode")
    assert (result["truncated"], result["reason"]) == (True, "the person at agent_0 left")
    assert validate_trace(trace) is None
    records = read_trace(trace)
    assert records[0]["agents"]["agent_0"]["kind"] == "human" and records[-1]["reason"] == "the person at agent_0 left"
    assert [r["agents"][0] for r in records if r["type"] == "step"][:5] == [[2, 1], [1, 1], [0, 1], [1, 1], [2, 1]]


def test_after_the_episode_ends_the_page_says_so(server, page):
    page.goto(server.url + "/?play=agent_0")
    until(lambda: page.evaluate("window.cube.app.mine.includes('agent_0')"), what="the seat")
    before = state(server)["game"]["id"]
    page.click("#new-episode")
    until(lambda: state(server)["game"]["id"] > before and
          [t for t in state(server)["turns"] if t["agent"] == "agent_0"], what="agent_0's first turn")
    until(lambda: "your turn" in page.locator("#turn").inner_text(), what="the turn shown")
    page.fill("#plan-text", "idle(200)")  # the heuristic teammate plays on until the episode ends
    page.click("#send-plan")
    until(lambda: "ended" in page.locator("#status").inner_text(), what="the end")
    status, turn = page.locator("#status").inner_text(), page.locator("#turn").inner_text()
    assert "running at" not in status and "waiting for" not in status
    assert turn.startswith("The episode has ended (") and "executing" not in turn
    shot(page, "ended.png")
    assert page.errors == []


def test_a_replay_reaches_the_last_step(server, page):
    page.goto(server.url + "/?view=replay")
    until(lambda: page.locator("#trace-list option[value='extra/0/heuristic.jsonl']").count() == 1, what="the list")
    page.select_option("#trace-list", "extra/0/heuristic.jsonl")
    page.click("#load-trace")
    replay = until(lambda: page.evaluate("window.cube.replay().last !== null && window.cube.replay()"), what="loading")
    records = read_trace(server.recorded)
    steps = [r for r in records if r["type"] == "step"]
    assert replay["last"] == len(steps) == records[-1]["steps"]
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    until(lambda: page.evaluate("window.cube.drawn()?.t") == 3, what="step 3")
    assert page.evaluate("window.cube.drawn()?.agents") == steps[2]["agents"]
    page.click("#last")
    until(lambda: page.evaluate("window.cube.drawn()?.ended"), what="the last step")
    drawn = page.evaluate("window.cube.drawn()")
    assert drawn["t"] == replay["last"] and drawn["agents"] == steps[-1]["agents"]
    assert page.evaluate("window.cube.replay().k") == replay["last"]
    assert "ended (terminated): all blocks delivered" in page.locator("#status").inner_text()
    assert page.locator("#scrub").input_value() == str(replay["last"])
    until(lambda: page.evaluate("document.getElementById('timeline').naturalWidth > 0"), what="the timeline")
    # the list marks the open trace, and says its name
    assert page.locator("#trace-list option:checked").inner_text() == "▶ extra/0/heuristic.jsonl (open)"
    assert page.locator("#open-trace").inner_text() == "open: extra/0/heuristic.jsonl"
    # the timeline enlarges on a click, to a readable size, and shrinks back on the next
    small = page.locator("#timeline").bounding_box()["width"]
    page.click("#timeline")
    large = page.locator("#timeline").bounding_box()
    assert large["width"] > 1.5 * small and large["width"] <= VIEWPORT["width"]
    shot(page, "replay-timeline.png")
    page.click("#timeline")
    assert page.locator("#timeline").bounding_box()["width"] == small
    page.click("#first")
    for _ in range(6):
        page.keyboard.press("ArrowRight")
    until(lambda: page.evaluate("window.cube.drawn()?.t") == 6, what="step 6")
    shot(page, "replay.png")
    assert page.errors == []


def test_a_malformed_websocket_message_from_the_page_gets_an_error_reply(server, page):
    page.goto(server.url + "/")
    until(lambda: page.evaluate("window.cube.drawn()"), what="the page")
    replies = page.evaluate("""async () => {
        const ws = new WebSocket(`ws://${location.host}/ws`);
        const got = [];
        await new Promise((resolve) => { ws.onopen = resolve; });
        const errors = new Promise((resolve) => {
            ws.onmessage = (event) => {
                const m = JSON.parse(event.data);
                if (m.type === 'error' || m.type === 'pong') got.push(m);
                if (got.length === 3) resolve();
            };
        });
        ws.send('{"type": "key", "agent": "agent_0", "key": 5');
        ws.send(JSON.stringify({type: 'run', speed: -3}));
        ws.send(JSON.stringify({type: 'ping', id: 42}));
        await errors;
        const open = ws.readyState === WebSocket.OPEN;
        ws.close();
        return {got, open};
    }""")
    first, second, third = replies["got"]
    assert first["type"] == "error" and first["error"].startswith("not JSON")
    assert second["type"] == "error" and second["error"] == "run: field 'speed': Input should be greater than 0"
    assert third == {"type": "pong", "id": 42, "t": third["t"]}
    assert replies["open"] is True
