import itertools

import pytest
from kb_agent.agent.extract import code_blocks, extract_code

MODULE = """import torch
import torch.nn as nn


class ModelNew(nn.Module):
    def forward(self, x):
        return torch.relu(x)
"""

HELPER = "def helper():\n    return 1\n"


def fenced(code: str, fence: str = "```", tag: str = "python", close: bool = True, indent: str = "") -> str:
    body = "".join(f"{indent}{line}\n" if line else "\n" for line in code.splitlines())
    return f"{indent}{fence}{tag}\n{body}" + (f"{indent}{fence}\n" if close else "")


@pytest.mark.parametrize(
    "fence, tag, before, after, crlf",
    list(
        itertools.product(
            ["```", "~~~", "````"],
            ["python", "py", "Python", "python3", "cuda", "cpp", "c++", "", " python title=model.py"],
            ["", "Here is the faster version:\n\n", "I fused the ops.\n"],
            ["", "\nThis should be about 2x faster.\n"],
            [False, True],
        )
    ),
)
def test_extracts_the_module_from_many_reply_shapes(fence, tag, before, after, crlf):
    text = before + fenced(MODULE, fence, tag) + after
    if crlf:
        text = text.replace("\n", "\r\n")
    assert extract_code(text) == MODULE


@pytest.mark.parametrize("fence", ["```", "~~~"])
@pytest.mark.parametrize("tag", ["python", "cuda", ""])
def test_missing_closing_fence_runs_to_the_end(fence, tag):
    text = "Sure.\n" + fenced(MODULE, fence, tag, close=False)
    assert extract_code(text) == MODULE


def test_truncated_mid_module_still_returns_what_there_is():
    cut = MODULE[: MODULE.index("return")]
    assert extract_code("```python\n" + cut) == cut.rstrip("\n") + "\n"


def test_last_block_defining_modelnew_wins():
    first = MODULE.replace("relu", "sigmoid")
    text = fenced(first) + "\nWait, a better one:\n" + fenced(MODULE) + "\nAnd a test:\n" + fenced(HELPER)
    assert extract_code(text) == MODULE


def test_block_without_modelnew_is_skipped():
    text = fenced(HELPER, tag="cuda") + fenced(MODULE) + fenced("print('usage')\n")
    assert extract_code(text) == MODULE


@pytest.mark.parametrize(
    "text",
    [
        None,
        "",
        "I cannot do that.",
        fenced(HELPER),
        fenced("class Model(nn.Module):\n    pass\n"),
        fenced("class ModelNewer(nn.Module):\n    pass\n"),
        "# no fences at all\n" + MODULE,  # unfenced code is not accepted
        "the class is called `class ModelNew` inline, no block",
    ],
)
def test_none_when_no_block_defines_modelnew(text):
    assert extract_code(text) is None


def test_tilde_fence_is_not_closed_by_backticks_and_longer_fence_holds_inner_fences():
    inner = MODULE + '\nDOC = """\n```python\nx = 1\n```\n"""\n'
    assert extract_code(fenced(inner, fence="````")) == inner
    assert extract_code(fenced(inner, fence="~~~")) == inner


def test_indented_fence_is_dedented_like_commonmark():
    text = "1. The module:\n" + fenced(MODULE, indent="   ")
    assert extract_code(text) == MODULE


def test_class_modelnew_with_base_list_or_colon_variants():
    for header in (
        "class ModelNew(torch.nn.Module):",
        "class ModelNew :",
        "class ModelNew(nn.Module, Mixin):",
    ):
        code = f"import torch\n{header}\n    pass\n"
        assert extract_code(fenced(code)) == code


def test_code_blocks_reports_info_and_closed():
    blocks = code_blocks(fenced(HELPER, tag="cuda") + fenced(MODULE, close=False))
    assert [(b.info, b.closed) for b in blocks] == [("cuda", True), ("python", False)]
