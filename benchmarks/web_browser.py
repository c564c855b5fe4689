"""The browser app's figures, measured in headless Chromium, and the screenshots of docs/browser.md.

    python benchmarks/web_browser.py                 # figures and screenshots (about a minute)
    python benchmarks/web_browser.py --no-shots      # figures only
    python benchmarks/web_browser.py --doc           # and rewrite the table of docs/browser.md

Figures
  page load      navigation start to the first drawing of the world (the page's own
                 ``performance.now()`` when it first draws), with DOMContentLoaded and the
                 load event, over fresh browser contexts (no cache), ``make(n=16)``.
  live view      while the heuristic team of ``make(n=16)`` (20x20, 16 agents) runs as fast
                 as the episode goes: redraws per second (animation frames that drew a new
                 state), animation frames per second, episode steps per second and the
                 mean time to draw one frame (canvas and panels), while the episode runs (at most 2 s).
  human move     round trip of a person's move on ``hard`` (a person beside two heuristic
                 agents): key press to the first drawn frame that shows the step that moved
                 the agent (the page's own clock); 30 moves.

Every figure comes from the page's counters (``window.cube.metrics()``). Prints the table
(:func:`render`) and writes ``benchmarks/results/web_browser.json``; the screenshots go to
``docs/browser/``; with ``--doc`` the generated block of ``docs/browser.md`` is rewritten from
the JSON.
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

CHROMIUM = "/usr/bin/chromium"
ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--disable-sync", "--no-first-run"]
VIEWPORT = {"width": 1280, "height": 900}


def until(*args, **kwargs):
    """``cube_jax.testing.web.until`` (imported when measuring)."""
    from cube_jax.testing.web import until as wait

    return wait(*args, **kwargs)


def page_load(browser, url: str, repeats: int) -> dict:
    first, ready, loaded = [], [], []
    for _ in range(repeats):
        context = browser.new_context(viewport=VIEWPORT)
        page = context.new_page()
        page.goto(url)
        until(lambda: page.evaluate("window.cube && window.cube.metrics().firstDraw !== null"))
        first.append(page.evaluate("window.cube.metrics().firstDraw"))
        timing = page.evaluate("(() => { const n = performance.getEntriesByType('navigation')[0];"
                               " return [n.domContentLoadedEventEnd, n.loadEventEnd]; })()")
        ready.append(timing[0])
        loaded.append(timing[1])
        context.close()
    return {"first_draw_ms": statistics.median(first), "dom_content_loaded_ms": statistics.median(ready),
            "load_event_ms": statistics.median(loaded), "repeats": repeats}


def live_view(browser, url: str, seconds: float, shots: Path = None) -> dict:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(url)
    until(lambda: page.evaluate("window.cube.drawn() !== null"))
    # a fresh episode: the heuristic team delivers every block of n = 16 in about 150 steps
    game = page.evaluate("window.cube.app.live.game.id")
    page.click("#new-episode")
    until(lambda: page.evaluate(f"window.cube.app.live.game.id > {game} && window.cube.drawn()?.steps >= 1"))
    # samples every 50 ms until the episode ends or the time is up; the rates cover the running part only
    probe = "(() => { const m = window.cube.metrics(), d = window.cube.drawn(); " \
            "return [performance.now(), m.draws, m.ticks, m.drawMs, d.steps, d.ended]; })()"
    samples = [page.evaluate(probe)]
    while samples[-1][0] - samples[0][0] < seconds * 1000 and not samples[-1][5]:
        time.sleep(0.05)
        samples.append(page.evaluate(probe))
    running = [x for x in samples if not x[5]]
    first, last = running[0], running[-1]
    elapsed = (last[0] - first[0]) / 1000
    draws = last[1] - first[1]
    result = {"redraws_per_s": draws / elapsed, "animation_frames_per_s": (last[2] - first[2]) / elapsed,
              "steps_per_s": (last[4] - first[4]) / elapsed, "draw_ms_mean": (last[3] - first[3]) / max(draws, 1),
              "seconds": elapsed, "steps": last[4] - first[4]}
    if shots is not None:  # mid-episode, at a watching pace
        page.select_option("#speed", "16")
        game = page.evaluate("window.cube.app.live.game.id")
        page.click("#new-episode")
        until(lambda: page.evaluate(f"window.cube.app.live.game.id > {game} && window.cube.drawn()?.steps >= 60"))
        page.click("#pause")
        time.sleep(0.5)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(shots / "live.png"), full_page=True)
    context.close()
    return result


def human_moves(browser, server, moves: int, shots: Path = None) -> dict:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(server.url + "/?play=agent_0")
    until(lambda: page.evaluate("window.cube.app.mine.includes('agent_0') && window.cube.app.live.turns['agent_0']"))
    for k in range(moves):
        done = len(page.evaluate("window.cube.metrics().moves"))
        page.keyboard.press("ArrowDown" if k % 2 == 0 else "ArrowUp")
        until(lambda: len(page.evaluate("window.cube.metrics().moves")) > done
              and page.evaluate("Boolean(window.cube.app.live.turns['agent_0'])"))
    times = [m["ms"] for m in page.evaluate("window.cube.metrics().moves")]
    if shots is not None:
        for key in ("ArrowRight", "ArrowRight"):
            done = len(page.evaluate("window.cube.metrics().moves"))
            page.keyboard.press(key)
            until(lambda: len(page.evaluate("window.cube.metrics().moves")) > done
                  and page.evaluate("Boolean(window.cube.app.live.turns['agent_0'])"))
        page.fill("#plan-text", "move_to_block(0, left); rendezvous(0, left, 3, 40); push_block(0, 5)")
        page.fill("#message-text", "Block 0 needs all three of us on its left face.")
        page.click("#send-plan")
        until(lambda: page.evaluate("window.cube.drawn()?.steps ?? 0") >= moves + 4)
        page.fill("#plan-text", "push_block(7, 3)")
        page.click("#send-plan")
        time.sleep(0.5)
        page.evaluate("window.scrollTo(0, 0)")
        page.screenshot(path=str(shots / "play.png"), full_page=True)
    context.close()
    times.sort()
    return {"moves": len(times), "median_ms": statistics.median(times), "p95_ms": times[int(0.95 * (len(times) - 1))],
            "max_ms": times[-1]}


def replay_shot(browser, server, shots: Path) -> None:
    context = browser.new_context(viewport=VIEWPORT)
    page = context.new_page()
    page.goto(server.url + "/?view=replay")
    until(lambda: page.locator("#trace-list option[value='extra/0/hard-heuristic.jsonl']").count() == 1)
    page.select_option("#trace-list", "extra/0/hard-heuristic.jsonl")
    page.click("#load-trace")
    until(lambda: page.evaluate("window.cube.replay().last !== null"))
    for _ in range(14):
        page.keyboard.press("ArrowRight")
    until(lambda: page.evaluate("document.getElementById('timeline').naturalWidth > 0"))
    time.sleep(0.3)
    page.evaluate("window.scrollTo(0, 0)")
    page.screenshot(path=str(shots / "replay.png"), full_page=True)
    context.close()


def render(data: dict) -> str:
    """The table of docs/browser.md's *Figures*, with the machine it was measured on."""
    load, live, move = data["page_load"], data["live_view_n16"], data["human_move"]
    machine = data["machine"] + (f", {data['cpus']} CPUs" if "cpus" in data else "")
    if "load_average" in data:
        machine += f", load average {data['load_average']:.1f} when it started"
    return "\n".join([
        f"Headless Chromium {data['chromium']}, Python {data['python']}, {machine}.",
        "",
        "| figure | value | how |",
        "| --- | --- | --- |",
        f"| page load | {load['first_draw_ms']:.0f} ms to the first drawing of the world (DOMContentLoaded "
        f"{load['dom_content_loaded_ms']:.0f} ms, load event {load['load_event_ms']:.0f} ms) | `make(n=16)`; "
        "navigation start to the page's first drawing of a world (after the WebSocket's `welcome`), median of "
        f"{load['repeats']} fresh contexts |",
        f"| live view, n = 16 | {live['redraws_per_s']:.1f} redraws per second at {live['steps_per_s']:.1f} episode "
        f"steps per second (animation frames {live['animation_frames_per_s']:.1f}/s); {live['draw_ms_mean']:.2f} ms "
        f"per drawing (canvas and 16 agent cards); {live['steps']} steps in {live['seconds']:.1f} s | 16 heuristic "
        "agents on 20x20 as fast as the episode goes; redraws are animation frames that drew a new state, counted "
        "while the episode runs |",
        f"| human move round trip | median {move['median_ms']:.0f} ms, p95 {move['p95_ms']:.0f} ms, max "
        f"{move['max_ms']:.0f} ms ({move['moves']} moves) | `hard`, a person beside two heuristic agents, full "
        "speed: key press to the first drawn frame that shows the step the move was taken in (the page's clock), "
        "through the WebSocket, the human agent's check, the episode step and the record's way back |",
    ]) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--no-shots", action="store_true", help="measure only; leave docs/browser/ alone")
    parser.add_argument("--doc", action="store_true", help="rewrite the generated table of docs/browser.md")
    parser.add_argument("--seconds", type=float, default=2.0,
                        help="length of the live-view sample (an n = 16 episode lasts about 2.5 s at full speed)")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    import cube_jax
    from cube_jax.agents import heuristic_team
    from cube_jax.runtime import run_episode
    from cube_jax.web.game import Settings
    from cube_jax.web.server import BackgroundServer, create_app

    shots = None if args.no_shots else ROOT / "docs" / "browser"
    if shots is not None:
        shots.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix="cube-jax-web-bench-"))
    recorded = work / "recorded"
    hard = cube_jax.make("hard")
    run_episode(hard, heuristic_team(hard), seed=0, trace=recorded / "hard-heuristic.jsonl")

    big = cube_jax.make(n=16)
    watch = create_app(big, Settings(world={"n": 16}, team="heuristic", out=work / "n16", speed=None))
    team = create_app(hard, Settings(world={"scenario": "hard"}, team="human,heuristic,heuristic",
                                     topology="decentralized", out=work / "play", speed=None), replays=[recorded])
    results = {"machine": platform.platform(), "python": platform.python_version(), "cpus": os.cpu_count(),
               "load_average": os.getloadavg()[0]}
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=ARGS)
        results["chromium"] = browser.version
        with BackgroundServer(watch) as server:
            results["page_load"] = page_load(browser, server.url + "/", repeats=5)
            results["live_view_n16"] = live_view(browser, server.url + "/", args.seconds, shots)
        with BackgroundServer(team) as server:
            results["human_move"] = human_moves(browser, server, 30, shots)
            if shots is not None:
                replay_shot(browser, server, shots)
        browser.close()

    print(render(results))
    out = ROOT / "benchmarks" / "results" / "web_browser.json"
    out.write_text(json.dumps(results, indent=2) + "\n")
    print(f"wrote {out}" + ("" if shots is None else f" and {shots}/live.png, play.png, replay.png"))
    if args.doc:
        from bench_common import write_generated

        write_generated(ROOT / "docs" / "browser.md", "benchmarks/web_browser.py",
                        "benchmarks/results/web_browser.json")


if __name__ == "__main__":
    main()
