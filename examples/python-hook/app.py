"""A nexo hook written in Python, built with componentize-py against wit/.

The same house rules as plugins/hooks/house-rules (the Rust one): `rm` in
the shell is refused, `git push` asks for a decision, a read or write under
`drafts/` goes to `reviewed/`, anything under `secrets/` is refused, API
tokens (`sk-...`) are redacted from results and prompts, and a result marked
CONFIDENTIAL is replaced. A hook imports nothing: it can only answer.

Build:  componentize-py -d ../../wit -w hook-plugin componentize app -o python_hook.wasm
"""

import re

from wit_world import exports
from wit_world.exports.hook import (
    After_Pass,
    After_Redact,
    After_Replace,
    Before_Allow,
    Before_Ask,
    Before_Deny,
    Before_Rewrite,
    Event,
    HookInfo,
    PromptDecision_Pass,
    PromptDecision_Redact,
)

TOKEN = re.compile(r"sk-[A-Za-z0-9_-]+")


def tokens(text: str) -> list:
    """The distinct `sk-...` tokens in `text`, in order."""
    found = []
    for token in TOKEN.findall(text):
        if token not in found:
            found.append(token)
    return found


class Hook(exports.Hook):
    def info(self) -> HookInfo:
        return HookInfo(
            name="python-house-rules",
            description="Refuses deletes and secrets, asks before a push, redacts API tokens",
            events=[Event.BEFORE_TOOL_CALL, Event.AFTER_TOOL_CALL, Event.BEFORE_PROMPT],
        )

    def before_tool_call(self, call):
        command = call.detail.lstrip()
        if call.capability == "shell" and (command == "rm" or command.startswith("rm ")):
            return Before_Deny("the house rules forbid deleting files")
        if call.capability == "shell" and "git push" in command:
            return Before_Ask("a push leaves the machine")
        if call.detail.startswith("secrets/") or "/secrets/" in call.detail:
            return Before_Deny("files under secrets/ are off limits")
        if call.capability in ("read", "write") and "drafts/" in call.arguments:
            return Before_Rewrite(call.arguments.replace("drafts/", "reviewed/"))
        return Before_Allow()

    def after_tool_call(self, call, output: str, is_error: bool):
        if "CONFIDENTIAL" in output:
            return After_Replace("withheld: the file is marked confidential")
        found = tokens(output)
        return After_Redact(found) if found else After_Pass()

    def before_prompt(self, prompt):
        found = tokens(prompt.system) + [t for t in tokens(prompt.messages) if t not in tokens(prompt.system)]
        return PromptDecision_Redact(found) if found else PromptDecision_Pass()
