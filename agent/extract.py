"""Finding the candidate in a model's reply: the fenced code block that defines `class ModelNew`."""

from __future__ import annotations

import re
from dataclasses import dataclass

# An opening fence: up to 3 spaces, then 3+ backticks or tildes, then an optional info string
# ("python", "py", "cuda", "cpp", "python title=x.py", ...). Backtick fences may not carry backticks
# in their info string (CommonMark).
_OPEN = re.compile(r"^(?P<indent> {0,3})(?P<fence>`{3,}|~{3,})(?P<info>[^\n]*)$")
_DEFINES_MODELNEW = re.compile(r"^[ \t]*class[ \t]+ModelNew\b", re.MULTILINE)


@dataclass
class CodeBlock:
    """One fenced block: its info string (`python`, `cuda`, or ""), its text, and whether it was closed."""

    info: str
    code: str
    closed: bool


def code_blocks(text: str) -> list[CodeBlock]:
    """Every fenced block in `text`, in order. A block left open at the end of the text (a reply cut
    off at the token limit) runs to the end."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[CodeBlock] = []
    i = 0
    while i < len(lines):
        m = _OPEN.match(lines[i])
        if not m or (m["fence"][0] == "`" and "`" in m["info"]):
            i += 1
            continue
        fence, info, indent = m["fence"], m["info"].strip(), len(m["indent"])
        close = re.compile(rf"^ {{0,3}}{re.escape(fence[0])}{{{len(fence)},}}[ \t]*$")
        body: list[str] = []
        i += 1
        while i < len(lines) and not close.match(lines[i]):
            line = lines[i]
            body.append(
                line[min(indent, len(line) - len(line.lstrip(" "))) :]
            )  # CommonMark: drop the fence's indent
            i += 1
        closed = i < len(lines)
        blocks.append(
            CodeBlock(info=info.split()[0].lower() if info else "", code="\n".join(body), closed=closed)
        )
        i += 1
    return blocks


def extract_code(text: str | None) -> str | None:
    """The candidate module in a model reply: the last fenced block that defines `class ModelNew`.

    Any info string is accepted (`python`, `py`, `cuda`, `cpp`, none), ``` or ~~~ fences, and a
    missing closing fence (a truncated reply). Returns the block's text ending in one newline, or None
    when no fenced block defines `class ModelNew` (unfenced code is not accepted: the prompt asks for
    a fenced block, and the no-code feedback says so).
    """
    if not text:
        return None
    found = [b.code for b in code_blocks(text) if _DEFINES_MODELNEW.search(b.code)]
    if not found:
        return None
    return found[-1].strip("\n") + "\n"


__all__ = ["CodeBlock", "code_blocks", "extract_code"]
