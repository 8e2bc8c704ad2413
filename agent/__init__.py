"""kb-agent: the agent loop, the LLM client, the trajectory store, the fast_p metric and the CLI.

Importing this package is cheap: heavy modules (litellm, torch) load only when a function that needs
them is used, so `from agent import solve` does not touch the network or a GPU.
"""

from importlib import import_module
from importlib.metadata import PackageNotFoundError, version

try:
    __version__ = version("kb-agent")
except PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0+unknown"

# public name -> module that defines it; resolved on first access (PEP 562)
_LAZY = {
    "solve": "kb_agent.agent.loop",
    "SolveConfig": "kb_agent.agent.loop",
    "Store": "kb_agent.agent.store",
    "fast_p": "kb_agent.agent.metrics",
}


def __getattr__(name: str):
    if name in _LAZY:
        return getattr(import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'agent' has no attribute {name!r}")


__all__ = ["__version__", *_LAZY]
