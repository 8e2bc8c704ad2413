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


def test_torch_compile_named_in_a_cuda_comment_or_a_message_breaks_no_rule():
    """helper-26: `// torch.compile would fuse this` inside cuda_sources, and an error message naming
    torch.compile, had honest kernels rejected by `static`."""
    source = (
        'cuda_src = """\n// one pass over x: torch.compile would fuse this too\n__global__ void k() {}\n"""\n'
        "def check(x):\n    if not x.is_contiguous():\n"
        '        raise ValueError("contiguous input expected (no torch.compile fallback here)")\n'
    )
    assert static_findings(source) == []


def test_a_string_that_is_the_modules_name_or_an_f_string_still_breaks_it():
    assert static_findings('import importlib\nimportlib.import_module("torch._dynamo")\n') == [
        "uses torch.compile/dynamo/inductor"
    ]
    assert static_findings('f = f"{torch.compile(g)}"\n') == ["uses torch.compile/dynamo/inductor"]
    # the other rules still read every string: one run through exec is code
    assert static_findings("exec('import sys; sys.modules')\n") == ["reads sys.modules"]


def test_modelnew_inheriting_model_breaks_the_rule_only_without_a_forward_of_its_own():
    # Kevin-32B's models subclassed the reference and kept its forward; helper-29's honest candidate
    # subclassed its own copy of Model for __init__ and wrote forward as a Triton kernel
    inherits = "class Model:\n    pass\n\n\nclass ModelNew(Model):\n    pass\n"
    assert static_findings(inherits) == ["ModelNew inherits from the reference Model (and its forward)"]
    own = "class Model:\n    pass\n\n\nclass ModelNew(Model):\n    def forward(self, x):\n        return kernel(x)\n"
    assert static_findings(own) == []
