"""The Python peer of nexo's conversation benchmark (host/benches/conversation.rs).

Runs the same conversation with the OpenAI Agents SDK (PyPI `openai-agents`,
installed by scripts/openai-agents-deps.sh) against the benchmark's loopback
fake server, over the same chat completions wire format. The history is kept
the SDK's own way: each turn's input is the previous result's
`to_input_list()` plus the new user message.

Reads a JSON job on stdin:

    {"base_url": "http://127.0.0.1:PORT/v1", "model": "...", "instructions": "...",
     "prompts": ["...", ...], "repeats": N}

and prints one JSON object on stdout:

    {"sdk": "openai-agents 0.24.0", "turn_ns": [[ns, ...], ...]}

with the wall time of every turn (building its input, the run, reading the
answer) of each of the `repeats` conversations, in nanoseconds. The
benchmark subtracts the fake server's own time per request.
"""

import asyncio
import importlib.metadata
import json
import sys
import time

from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from openai import AsyncOpenAI


async def conversation(agent, prompts):
    """One conversation; the wall time of each turn, in nanoseconds."""
    times = []
    history = []
    for prompt in prompts:
        start = time.perf_counter_ns()
        turn_input = history + [{"role": "user", "content": prompt}]
        result = await Runner.run(agent, turn_input)
        history = result.to_input_list()
        answer = result.final_output
        times.append(time.perf_counter_ns() - start)
        if not answer:
            raise SystemExit(f"turn {len(times)} got no answer")
    return times


async def main():
    job = json.load(sys.stdin)
    # Tracing would export every run to the hosted API: not part of a turn here.
    set_tracing_disabled(True)
    client = AsyncOpenAI(base_url=job["base_url"], api_key="bench-key", max_retries=0)
    model = OpenAIChatCompletionsModel(model=job["model"], openai_client=client)
    agent = Agent(name="bench", instructions=job["instructions"], model=model)
    runs = [await conversation(agent, job["prompts"]) for _ in range(job["repeats"])]
    await client.close()
    version = importlib.metadata.version("openai-agents")
    print(json.dumps({"sdk": f"openai-agents {version}", "turn_ns": runs}))


if __name__ == "__main__":
    asyncio.run(main())
