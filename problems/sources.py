"""Where problems come from: a local copy of KernelBench (parquet or a checkout), the Hugging Face Hub,
or kb-agent's own toy problems.

Resolution order for KernelBench levels: an explicit `dataset` path, else the `KB_DATASET` environment
variable, else the Hub dataset `ScalingIntelligence/KernelBench`.
"""

from __future__ import annotations

import logging
import os
import re
from functools import lru_cache
from pathlib import Path

from kb_agent.problems.problem import Problem, ProblemError

log = logging.getLogger(__name__)

HUB_DATASET = "ScalingIntelligence/KernelBench"
DATASET_ENV = "KB_DATASET"
_NAME_RE = re.compile(r"^(\d+)_(.+)$")
_TOY_DIR = Path(__file__).parent / "toy"
_POINT_AT_LOCAL = (
    f"point --dataset or {DATASET_ENV} at a local copy (a folder with level_N parquet files, "
    "or a KernelBench checkout)"
)


def _id_from_name(name: str) -> int:
    m = _NAME_RE.match(name)
    if not m:
        raise ProblemError(f"problem file name {name!r} does not start with '<id>_'")
    return int(m.group(1))


def toy_problems() -> dict[int, Problem]:
    """kb-agent's own small problems (level 0), keyed by problem_id. Names drop the id prefix."""
    out = {}
    for path in sorted(_TOY_DIR.glob("[0-9]*_*.py")):
        pid = _id_from_name(path.stem)
        out[pid] = Problem(0, pid, path.stem.split("_", 1)[1], path.read_text(), "toy")
    return out


class LocalParquet:
    """A folder in the Hub's layout: `data/level_N-*.parquet` (or `level_N-*.parquet` at its top)."""

    def __init__(self, root: Path):
        self.root = root
        self.files: dict[int, list[Path]] = {}
        for f in sorted(list(root.glob("level_*.parquet")) + list(root.glob("data/level_*.parquet"))):
            m = re.match(r"level_(\d+)", f.name)
            if m:
                self.files.setdefault(int(m.group(1)), []).append(f)
        self.label = str(root)

    def levels(self) -> list[int]:
        return sorted(self.files)

    def load_level(self, level: int) -> list[Problem]:
        import pyarrow.parquet as pq

        rows = []
        for f in self.files[level]:
            # ParquetFile.read avoids pq.read_table's import of pyarrow.dataset and pandas (~0.4 s)
            rows += pq.ParquetFile(f).read(columns=["code", "level", "name", "problem_id"]).to_pylist()
        return [
            Problem(int(r["level"]), int(r["problem_id"]), r["name"], r["code"], self.label) for r in rows
        ]


class KernelBenchCheckout:
    """A clone of github.com/ScalingIntelligence/KernelBench: `KernelBench/levelN/<id>_<name>.py`."""

    def __init__(self, root: Path):
        base = root / "KernelBench" if (root / "KernelBench").is_dir() else root
        self.dirs = {
            int(d.name[5:]): d for d in base.glob("level[0-9]*") if d.is_dir() and d.name[5:].isdigit()
        }
        self.label = str(root)

    def levels(self) -> list[int]:
        return sorted(self.dirs)

    def load_level(self, level: int) -> list[Problem]:
        return [
            Problem(level, _id_from_name(p.stem), p.stem, p.read_text(), str(p))
            for p in sorted(self.dirs[level].glob("[0-9]*_*.py"))
        ]


def _require_hub(host: str = "huggingface.co", timeout_s: float = 5.0) -> None:
    """Fail at once, with what to do, when the Hub cannot be reached (the datasets library would
    otherwise retry for about 20 s before failing with a less helpful error)."""
    import socket

    try:
        socket.create_connection((host, 443), timeout=timeout_s).close()
    except OSError as e:
        raise ProblemError(
            f"cannot reach the Hugging Face Hub ({e.strerror or e}); {_POINT_AT_LOCAL}"
        ) from None


class Hub:
    """The Hugging Face dataset `ScalingIntelligence/KernelBench`, splits `level_1`..`level_4`."""

    label = f"hub:{HUB_DATASET}"

    def levels(self) -> list[int]:
        return [1, 2, 3, 4]

    def load_level(self, level: int) -> list[Problem]:
        if os.environ.get("HF_HUB_OFFLINE") == "1" or os.environ.get("HF_DATASETS_OFFLINE") == "1":
            raise ProblemError(f"offline, so the Hub dataset {HUB_DATASET} cannot be read; {_POINT_AT_LOCAL}")
        _require_hub()
        import datasets

        try:
            ds = datasets.load_dataset(HUB_DATASET, split=f"level_{level}")
        except (
            Exception
        ) as e:  # network errors come in many types (ConnectionError, OfflineModeIsEnabled, ...)
            raise ProblemError(
                f"cannot read {HUB_DATASET} from the Hub ({type(e).__name__}); {_POINT_AT_LOCAL}"
            ) from e
        return [Problem(int(r["level"]), int(r["problem_id"]), r["name"], r["code"], self.label) for r in ds]


def open_dataset(dataset: str | os.PathLike | None = None) -> LocalParquet | KernelBenchCheckout | Hub:
    """The KernelBench source to read: `dataset`, else `$KB_DATASET`, else the Hub.

    Raises:
        ProblemError: the path does not exist or holds neither layout.
    """
    path = dataset or os.environ.get(DATASET_ENV)
    if not path:
        return Hub()
    root = Path(path).expanduser()
    if not root.is_dir():
        what = "is a file, not a folder" if root.exists() else "does not exist"
        raise ProblemError(f"dataset folder {str(root)!r} {what}; {_POINT_AT_LOCAL}")
    for kind in (LocalParquet, KernelBenchCheckout):
        src = kind(root)
        if src.levels():
            return src
    raise ProblemError(
        f"{str(root)!r} holds neither level_N parquet files nor KernelBench/levelN/*.py; {_POINT_AT_LOCAL}"
    )


@lru_cache(maxsize=32)
def _load_level_cached(src_key: str, level: int) -> tuple[Problem, ...]:
    return tuple(sorted(open_dataset(src_key or None).load_level(level), key=lambda p: p.problem_id))


def load_level(level: int, dataset: str | os.PathLike | None = None) -> list[Problem]:
    """All problems of one KernelBench level, sorted by problem_id.

    Raises:
        ProblemError: the level does not exist in the source, or the source cannot be read.
    """
    if level == 0:
        return list(toy_problems().values())
    src = open_dataset(dataset)
    if level not in src.levels():
        have = ", ".join(map(str, src.levels()))
        raise ProblemError(f"level {level} does not exist in {src.label}; levels: {have} (and toy)")
    return list(_load_level_cached(str(dataset or os.environ.get(DATASET_ENV) or ""), level))


def available_levels(dataset: str | os.PathLike | None = None) -> list[int]:
    return open_dataset(dataset).levels()
