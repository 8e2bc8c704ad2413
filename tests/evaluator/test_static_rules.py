"""Strict mode's source rules (`strict.static_findings`): what the code says, not its comments and docstrings."""

from kb_agent.evaluator.strict import static_findings

HONEST_WITH_PROSE = '''"""A fused ReLU; torch.compile would fuse it too, and nothing here reads sys.modules."""
import torch  # should beat what torch.compile generates (no f_back, no gc.get_objects either)


class ModelNew(torch.nn.Module):
    def forward(self, x):
        """Faster than torch._dynamo's kernel; unlike kb_agent.evaluator we touch no frames."""
        return x.clamp_min(0.0)  # ü: a comment after non-ASCII text
'''


def test_comments_and_docstrings_break_no_rule():
    """helper-18 (2026-12-07): an honest Triton ReLU commented "should beat what torch.compile
    generates" was rejected by `static`."""
    assert static_findings(HONEST_WITH_PROSE) == []


def test_the_same_names_in_code_still_break_the_rules():
    source = HONEST_WITH_PROSE.replace(
        "return x.clamp_min(0.0)", 'return torch.compile(lambda t: t)(x) or "é"'
    )
    source += "import sys\nmods = sys.modules\nexec('import gc; gc.get_objects()')\n"
    assert static_findings(source) == [
        "uses torch.compile/dynamo/inductor",
        "walks the garbage collector",
        "reads sys.modules",
    ]


def test_a_source_that_does_not_parse_is_scanned_whole():
    assert static_findings("def f(:\n    sys.modules") == ["reads sys.modules"]
