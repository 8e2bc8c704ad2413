"""Prompt and feedback templates (text files, one per message kind and backend) and their renderer.

Imports nothing of ours. `render(name, **variables)` fails loudly on a missing variable.
"""

from kb_agent.prompts.render import (
    BACKENDS,
    EXAMPLE_MARKER,
    PromptError,
    example_parts,
    example_source,
    placeholders,
    render,
    template_names,
    template_text,
)

__all__ = [
    "BACKENDS",
    "EXAMPLE_MARKER",
    "PromptError",
    "example_parts",
    "example_source",
    "placeholders",
    "render",
    "template_names",
    "template_text",
]
