"""Seconds and tokens per call of the local model (``cube-jax llm --model local``), with and
without llama.cpp's prompt cache, at n = 2 and 4.

    python benchmarks/local_model_calls.py                 # 6 calls per cell
    python benchmarks/local_model_calls.py --calls 12

Each cell plays one episode of language agents (``individual`` topology, seed 0) on the
n-curriculum against a fresh local server (one thread, ``cache_prompt`` on or off) until the
call limit, and reports the calls' mean latency and tokens from the trace's ``llm``
records. Prints a table and writes ``benchmarks/results/local_model_calls.json``.
"""
from __future__ import annotations

import argparse
import io
import json
import os
import statistics
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

import cube_jax  # noqa: E402
from cube_jax.runtime import Limits, run_episode  # noqa: E402
from cube_jax.trace import TraceWriter  # noqa: E402
from cube_jax.llm import ModelClient  # noqa: E402
from cube_jax.llm.agent import LLMAgent  # noqa: E402
from cube_jax.llm.local import MODEL_NAME, LocalServer  # noqa: E402

from bench_common import markdown_table  # noqa: E402

RESULTS = ROOT / "benchmarks" / "results" / "local_model_calls.json"


def measure(n: int, cache: bool, calls: int) -> dict:
    env = cube_jax.make(n=n)
    with LocalServer(cache_prompt=cache, parallel=n) as server:
        client = ModelClient(MODEL_NAME, base_url=server.base_url, timeout=600.0)
        buffer = io.StringIO()
        run_episode(env, [LLMAgent(client) for _ in range(n)], seed=0, trace=TraceWriter(buffer),
                    limits=Limits(max_calls=calls))
    records = [json.loads(line) for line in buffer.getvalue().splitlines() if '"type": "llm"' in line]
    return {
        "n": n, "prompt_cache": cache, "calls": len(records),
        "seconds_per_call": round(statistics.mean(r["latency_s"] for r in records), 2),
        "prompt_tokens_per_call": round(statistics.mean(r["prompt_tokens"] for r in records)),
        "completion_tokens_per_call": round(statistics.mean(r["completion_tokens"] for r in records)),
        "valid_share": round(sum(r["valid"] for r in records) / len(records), 3),
    }


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=6, help="model calls per cell (default 6)")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args(argv)
    if args.calls < 1:
        parser.error(f"argument --calls: must be >= 1, got {args.calls}")
    rows = [measure(n, cache, args.calls) for n in (2, 4) for cache in (True, False)]
    data = {"model": MODEL_NAME, "cpus": os.cpu_count(), "load_average": list(os.getloadavg()), "rows": rows}
    print(markdown_table(f"Local model per call ({MODEL_NAME}, 1 thread)", rows,
                         ["n", "prompt_cache", "calls", "seconds_per_call", "prompt_tokens_per_call",
                          "completion_tokens_per_call", "valid_share"]))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(data, indent=2) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
