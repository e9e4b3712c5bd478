"""A nexo agent written in Python, built with componentize-py against wit/.

`run` surveys the agent's workspace through the host's tools (`glob`, then
`read-file` for each text file), logs what it did, and then asks the model
(the host's `prompt` import) to answer the task with that survey in hand. With
no model configured it returns the survey alone, so it also runs offline
without a script.

Build:  componentize-py -d ../../wit -w agent-plugin componentize app -o python_agent.wasm
"""

import re
import sys

from wit_world import exports
from wit_world.exports.agent import AgentManifest, PermissionMode, RunError_Failed, RunError_Model
from wit_world.imports import log, model, tools
from wit_world.imports.types import Capability, ToolError_NotFound
from componentize_py_types import Err

# Files read per run, and bytes of each file quoted to the model.
MAX_FILES = 20
QUOTE_BYTES = 2000


def describe(error) -> str:
    """`tool-error` and `model-error` are variants: one dataclass per case,
    named `ToolError_InvalidInput` and so on. Prints `invalid-input: …`."""
    case = type(error).__name__.split("_", 1)[-1]
    return f"{re.sub(r'(?<!^)(?=[A-Z])', '-', case).lower()}: {error.value}"


class Agent(exports.Agent):
    def manifest(self) -> AgentManifest:
        # Must not call the host: `nexo inspect` reads it.
        return AgentManifest(
            name="python-agent",
            description="Surveys its workspace with glob and read-file, then answers with the model",
            instructions="Answer the task using the workspace survey you are given; cite file paths.",
            model=None,
            provider=None,
            skills=[],
            capabilities=[Capability.READ, Capability.GLOB],
            fetch_allow=[],
            mcp_servers=[],
            max_turns=4,
            sandbox=None,
            permissions=PermissionMode.READ_ONLY,
        )

    def run(self, input: str) -> str:
        if not input.strip():
            raise Err(RunError_Failed("the input is empty: say what to do with the workspace"))
        try:
            paths = tools.glob("**/*")
        except Err as e:
            raise Err(RunError_Failed(f"glob was refused ({describe(e.value)})"))

        rows, quotes, total_lines, total_words = [], [], 0, 0
        for path in paths[:MAX_FILES]:
            try:
                text = tools.read_file(path)
            except Err as e:
                if isinstance(e.value, ToolError_NotFound):
                    continue  # a directory, or gone since the glob
                rows.append(f"- {path}: unreadable ({describe(e.value)})")
                continue
            lines, words = len(text.splitlines()), len(text.split())
            total_lines += lines
            total_words += words
            title = next((l.lstrip("# ").strip() for l in text.splitlines() if l.strip()), "")
            rows.append(f"- {path}: {lines} lines, {words} words; first line: {title!r}")
            quotes.append(f"--- {path}\n{text[:QUOTE_BYTES]}")

        survey = "\n".join(
            [f"{len(rows)} files, {total_lines} lines, {total_words} words (python {sys.version_info.major}.{sys.version_info.minor})"] + rows
        )
        log.log(log.Level.INFO, f"surveyed {len(paths)} paths, read {len(quotes)} files")

        try:
            reply = model.prompt(f"{input}\n\nWorkspace survey:\n{survey}\n\n" + "\n".join(quotes))
        except Err as e:
            if isinstance(e.value, model.ModelError_NotConfigured):
                log.log(log.Level.WARN, "no model configured; answering with the survey alone")
                return f"Workspace survey:\n{survey}"
            raise Err(RunError_Model(e.value))
        return f"{reply.text}\n\nWorkspace survey ({reply.turns} model turns):\n{survey}"
