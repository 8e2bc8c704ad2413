"""The red-team catalogue: every candidate in `candidates/` with the header its docstring declares.

Header lines (`key: value`, one per line, in the module docstring):
    class:        the threat class, "N name" (1 stale-memory ... 10 faults, 0 honest)
    attack:       what it tries (free text, may continue on indented lines)
    problem:      a problem spec (`toy/relu`, `1/19`) or a path relative to the repository root
    expected:     the status a trustworthy evaluator gives in strict mode
    accept:       other statuses that are also fine (comma separated), optional
    device:       cpu (runs here: plain torch or Triton under TRITON_INTERPRET=1), gpu, or cpu-only (a
                  host-code kernel that no GPU can run: evaluated on the CPU in a GPU table too)
    max_speedup:  optional; when the status is `correct`, the speedup must not exceed this (on a GPU)
    max_speedup_cpu: optional; the same bound for device cpu (the Triton interpreter is far slower than
                  torch, so an honest Triton candidate scores well below 1 there); default max_speedup
    runs:         optional; evaluate this many times in a row and judge the last (cross-evaluation attacks)
    limits:       optional StageLimits overrides, "build_s=3, correctness_s=2"
    artifacts:    optional, comma separated paths the attack tries to create (reported, then removed)
    pidfile:      optional; a file where the attack writes pids of processes meant to outlive the child
    lingering:    optional; a string unique to this candidate's subprocesses' command lines (e.g. its
                  extension name): any process still running with it after the evaluation is an orphan
    limits_first: optional StageLimits overrides for the first of several runs only
    fresh_build:  optional "yes": build in a new, empty KB_BUILD_DIR (shared by this candidate's runs)
    slow:         optional "yes": a C++/CUDA build or a long compile

Used by tests/redteam/test_redteam.py and tests/bench/redteam_table.py; loaded by path (no package).
"""

from __future__ import annotations

import ast
import dataclasses
import glob
import os
import shutil
import signal
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
CANDIDATES = HERE / "candidates"

STATUSES = {"rejected", "incorrect", "runtime_error", "timeout", "compile_error", "correct"}

# Fake secrets put in the evaluating process's environment: none may come back in a result.
CANARIES = {
    "OPENAI_API_KEY": "sk-redteam-canary-0a1b2c",
    "ANTHROPIC_API_KEY": "sk-ant-redteam-canary-3d4e5f",
    "HF_TOKEN": "hf_redteam_canary_6a7b8c",
    "GITHUB_TOKEN": "ghp_redteam_canary_9d0e1f",
    "AWS_SECRET_ACCESS_KEY": "aws-redteam-canary-2a3b4c",
    "KB_REDTEAM_SECRET": "redteam-canary-5d6e7f",
    # credentials in values under harmless names (helper-31): a URL's password, a token's shape
    "PIP_INDEX_URL": "https://deploy:redteam-canary-url-8a9b@pypi.example.org/simple",
    "KB_REDTEAM_BROKER": "amqp://worker:redteam-canary-amqp-4c5d@broker:5672/",
    "KB_REDTEAM_SETTING": "sk-redteamcanaryvalue0123456789",
}


@dataclass
class Candidate:
    name: str
    path: Path
    cls: str
    attack: str
    problem: str
    expected: str
    accept: list[str] = field(default_factory=list)
    device: str = "cpu"
    max_speedup: float | None = None
    max_speedup_cpu: float | None = None
    runs: int = 1
    limits: dict[str, float] = field(default_factory=dict)
    artifacts: list[str] = field(default_factory=list)
    pidfile: str | None = None
    lingering: str | None = None
    limits_first: dict[str, float] = field(default_factory=dict)
    fresh_build: bool = False
    slow: bool = False

    @property
    def source(self) -> str:
        return self.path.read_text()

    @property
    def allowed(self) -> set[str]:
        return {self.expected, *self.accept}

    @property
    def class_no(self) -> int:
        return int(self.cls.split()[0])

    def speed_bound(self, device: str) -> float | None:
        if device == "cpu" and self.max_speedup_cpu is not None:
            return self.max_speedup_cpu
        return self.max_speedup


KEYS = (
    "class",
    "attack",
    "problem",
    "expected",
    "accept",
    "device",
    "max_speedup",
    "max_speedup_cpu",
    "runs",
    "limits",
    "artifacts",
    "pidfile",
    "lingering",
    "limits_first",
    "fresh_build",
    "slow",
)


def _header(doc: str) -> dict[str, str]:
    """`key: value` lines for the known keys; a following non-blank line that is not a key continues the
    value; a blank line ends it."""
    out: dict[str, str] = {}
    key = None
    for line in doc.splitlines():
        head, sep, rest = line.partition(":")
        if sep and head.strip().lower() in KEYS and not line[:1].isspace():
            key = head.strip().lower()
            out[key] = rest.strip()
        elif key and line.strip():
            out[key] += " " + line.strip()
        else:
            key = None
    return out


def load(path: Path) -> Candidate:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    h = _header(doc)
    missing = [k for k in ("class", "attack", "problem", "expected", "device") if k not in h]
    if missing:
        raise ValueError(f"{path.name}: header lacks {', '.join(missing)}")
    accept = [s.strip() for s in h.get("accept", "").split(",") if s.strip()]
    for s in [h["expected"], *accept]:
        if s not in STATUSES:
            raise ValueError(f"{path.name}: unknown status {s!r}")
    if h["device"] not in ("cpu", "gpu", "cpu-only"):
        raise ValueError(f"{path.name}: device must be cpu, gpu or cpu-only")

    def _limits(text: str) -> dict[str, float]:
        out = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            k, _, v = part.partition("=")
            out[k.strip()] = float(v)
        return out

    limits = _limits(h.get("limits", ""))
    return Candidate(
        name=path.stem,
        path=path,
        cls=h["class"],
        attack=h["attack"],
        problem=h["problem"],
        expected=h["expected"],
        accept=accept,
        device=h["device"],
        max_speedup=float(h["max_speedup"]) if "max_speedup" in h else None,
        max_speedup_cpu=float(h["max_speedup_cpu"]) if "max_speedup_cpu" in h else None,
        runs=int(h.get("runs", "1")),
        limits=limits,
        artifacts=[a.strip() for a in h.get("artifacts", "").split(",") if a.strip()],
        pidfile=h.get("pidfile"),
        lingering=h.get("lingering"),
        limits_first=_limits(h.get("limits_first", "")),
        fresh_build=h.get("fresh_build", "").lower() in ("yes", "true", "1"),
        slow=h.get("slow", "").lower() in ("yes", "true", "1"),
    )


def all_candidates() -> list[Candidate]:
    return [load(p) for p in sorted(CANDIDATES.glob("*.py"))]


def resolve_problem(spec: str):
    from kb_agent.problems import resolve_one

    if spec.endswith(".py"):
        spec = str(ROOT / spec)
    return resolve_one(spec)


def has_strict() -> bool:
    from kb_agent.evaluator import EvalSettings

    return "strict" in {f.name for f in dataclasses.fields(EvalSettings)}


def settings_for(c: Candidate, device: str, strict: bool | None, first: bool = False):
    """EvalSettings for one candidate: `strict` None leaves the field out (an evaluator without it)."""
    from kb_agent.evaluator import EvalSettings, StageLimits

    kw: dict = {"device": device}
    if strict is not None:
        kw["strict"] = strict
    limits = {**c.limits, **(c.limits_first if first else {})}
    if limits:
        kw["limits"] = StageLimits(**limits)
    return EvalSettings(**kw)


def _expand(p: str) -> list[str]:
    return glob.glob(os.path.expanduser(p))


def cleanup(c: Candidate) -> None:
    for a in c.artifacts:
        for p in _expand(a):
            if os.path.isdir(p) and not os.path.islink(p):
                shutil.rmtree(p, ignore_errors=True)
            else:
                try:
                    os.unlink(p)
                except OSError:
                    pass
    if c.pidfile:
        try:
            os.unlink(c.pidfile)
        except OSError:
            pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    try:  # a zombie is dead for our purposes
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"
    except OSError:
        return False


def _pids_with(marker: str) -> list[int]:
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open(f"/proc/{d}/cmdline", "rb") as f:
                if marker.encode() in f.read():
                    out.append(int(d))
        except OSError:
            pass
    return out


@dataclass
class Outcome:
    candidate: Candidate
    device: str
    status: str
    speedup: float | None
    message: str
    strict_info: dict | None
    artifacts_created: list[str]
    orphans: list[int]
    leaked: list[str]
    seconds: float
    result: object = None
    strict: bool | None = None

    @property
    def problems(self) -> list[str]:
        """Why this outcome is not what a trustworthy evaluator gives; empty when it is."""
        c = self.candidate
        out = []
        if self.status not in c.allowed and not self.blocked_by_rule:
            out.append(
                f"status {self.status}, expected {c.expected}"
                + (f" (or {', '.join(c.accept)})" if c.accept else "")
            )
        bound = c.speed_bound(self.device)
        if (
            self.status == "correct"
            and bound is not None
            and self.speedup is not None
            and self.speedup > bound
        ):
            out.append(f"speedup {self.speedup:.3g} above the plausible {bound:g}")
        if self.strict and c.class_no == 8 and self.artifacts_created:
            out.append(f"the side effect happened: {', '.join(self.artifacts_created)} exist(s)")
        if self.orphans:
            out.append(f"left processes running: {self.orphans}")
        if self.leaked:
            out.append(f"leaked secrets: {', '.join(self.leaked)}")
        return out

    @property
    def failed_checks(self) -> dict[str, str]:
        checks = (self.strict_info or {}).get("checks") or {}
        return {
            k: v.get("detail", "")
            for k, v in checks.items()
            if isinstance(v, dict) and not v.get("passed", True)
        }

    @property
    def blocked_by_rule(self) -> bool:
        """An attack expected to be `rejected` that the strict sandbox stopped by raising (so the status
        is the stage's compile_error/runtime_error) while a strict check names the rule: not a hole."""
        return (
            self.candidate.expected == "rejected"
            and self.status in ("compile_error", "runtime_error")
            and bool(self.failed_checks)
        )

    @property
    def ok(self) -> bool:
        return not self.problems


def reason(r) -> str:
    """One line saying why: the strict verdict's reason when there is one, else the message."""
    s = getattr(r, "strict", None)
    if isinstance(s, dict):
        for k in ("reason", "message", "why"):
            if s.get(k):
                return str(s[k]).splitlines()[0]
    return (r.message or "").strip().splitlines()[0] if r.message else ""


def run(c: Candidate, device: str, strict: bool | None, manage_env: bool = True) -> Outcome:
    """Evaluate `c` (`c.runs` times; the last run is judged), with canary secrets in the environment.

    manage_env=False leaves os.environ alone (the caller has put CANARIES there already, e.g. when
    several candidates run at once in threads); KB_BUILD_DIR for `fresh_build` is still set, so such
    candidates must not run concurrently with others.
    """
    from kb_agent.evaluator import evaluate

    cleanup(c)
    keys = (*CANARIES, "KB_BUILD_DIR") if manage_env else ("KB_BUILD_DIR",)
    saved = {k: os.environ.get(k) for k in keys}
    if manage_env:
        os.environ.update(CANARIES)
    tmp_build = tempfile.mkdtemp(prefix="kb-redteam-build-") if c.fresh_build else None
    if tmp_build:
        os.environ["KB_BUILD_DIR"] = tmp_build
    t0 = time.perf_counter()
    try:
        problem = resolve_problem(c.problem)
        r = None
        for i in range(c.runs):
            r = evaluate(problem, c.source, settings_for(c, device, strict, first=(i == 0)))
    finally:
        if tmp_build:
            shutil.rmtree(tmp_build, ignore_errors=True)
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    seconds = time.perf_counter() - t0
    created = [p for a in c.artifacts for p in _expand(a)]
    orphans: list[int] = []
    if c.pidfile and os.path.exists(c.pidfile):
        time.sleep(0.5)
        pids = [int(x) for x in Path(c.pidfile).read_text().split() if x.strip().isdigit()]
        orphans = [p for p in pids if _alive(p)]
        for p in orphans:  # processes this candidate started: end them by id
            try:
                os.kill(p, signal.SIGKILL)
            except OSError:
                pass
    if c.lingering:
        time.sleep(0.5)
        mine = os.getpid()
        for p in _pids_with(c.lingering):
            if p != mine and _alive(p):
                orphans.append(p)
                try:  # a compiler or helper this candidate started: end it by id
                    os.kill(p, signal.SIGKILL)
                except OSError:
                    pass
    text = r.to_json()
    leaked = [k for k, v in CANARIES.items() if v in text]
    cleanup(c)
    return Outcome(
        candidate=c,
        device=device,
        status=str(r.status),
        speedup=r.speedup,
        message=r.message or "",
        strict_info=getattr(r, "strict", None),
        artifacts_created=created,
        orphans=orphans,
        leaked=leaked,
        seconds=seconds,
        result=r,
        strict=strict,
    )
