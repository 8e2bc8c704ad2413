"""kb-agent's one import package.

The project's folders stay at the top of the source tree (`agent/`, `evaluator/`, `problems/`,
`prompts/`; see DESIGN.md) and install as `kb_agent.agent`, `kb_agent.evaluator`, ... (setuptools'
`package-dir`), so site-packages gains one name. Run from a source tree that was never installed (the
GPU machine, with `PYTHONPATH` at the checkout), the folders beside this one are found the same way.
"""

from pathlib import Path

_ROOT = Path(__file__).resolve().parent.parent
if (_ROOT / "pyproject.toml").is_file() and (_ROOT / "evaluator" / "worker.py").is_file():
    __path__.append(str(_ROOT))  # noqa: F821 - a package's own __path__ (PEP 302)
