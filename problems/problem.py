"""The `Problem` record: one KernelBench-format reference program."""

from __future__ import annotations

import hashlib
from dataclasses import asdict, dataclass

from kb_agent.problems.errors import KBAgentError


class ProblemError(KBAgentError, ValueError):
    """A problem spec or dataset that cannot be resolved; the message says what exists or what to do."""


@dataclass(frozen=True)
class Problem:
    """One reference program in KernelBench format.

    Attributes:
        level: KernelBench level (1-4), or 0 for kb-agent's own toy problems, or None for a loose file.
        problem_id: the leading integer of the KernelBench file name (1-based, contiguous per level);
            never a row position.
        name: file name without `.py`, e.g. `40_Matmul_Scaling_ResidualAdd`.
        code: the full reference source: `class Model(nn.Module)`, `get_inputs()`, `get_init_inputs()`.
        source: where it came from (`hub:ScalingIntelligence/KernelBench`, a local path, or `toy`).
    """

    level: int | None
    problem_id: int
    name: str
    code: str
    source: str

    @property
    def key(self) -> str:
        """Short id as written in specs and reports: `2/40`, `toy/relu`, or the file name."""
        if self.level is None:
            return self.name
        if self.level == 0:
            return f"toy/{self.name}"
        return f"{self.level}/{self.problem_id}"

    @property
    def code_sha256(self) -> str:
        """SHA-256 (hex) of `code`: tells two versions of a problem apart where `key` cannot."""
        return hashlib.sha256(self.code.encode()).hexdigest()

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> Problem:
        return cls(**{k: d[k] for k in ("level", "problem_id", "name", "code", "source")})
