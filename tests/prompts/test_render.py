import pytest
from kb_agent.prompts import PromptError, example_parts, placeholders, render, template_names, template_text

FEEDBACK_KINDS = [
    "compile_error", "runtime_error", "timeout", "incorrect", "rejected", "correct", "no_code", "unchecked"
]  # fmt: skip
HINT_KINDS = ["compile_error", "runtime_error", "timeout", "incorrect", "rejected", "correct"]


def test_every_expected_template_exists():
    names = set(template_names())
    assert {"system", "task_cuda", "task_triton"} <= names
    assert {f"feedback_{k}" for k in FEEDBACK_KINDS} <= names
    assert {f"hint_{k}" for k in HINT_KINDS} <= names


def test_missing_variable_names_template_and_variable():
    with pytest.raises(PromptError, match=r"'feedback_timeout'.*'body'"):
        render("feedback_timeout")


def test_extra_variables_are_fine_and_values_are_not_reparsed():
    text = render("feedback_timeout", body="costs $5 and ${x}", unused=1)
    assert "costs $5 and ${x}" in text


def test_name_with_or_without_suffix_and_unknown_template():
    assert render("system") == render("system.txt")
    with pytest.raises(PromptError, match="no prompt template 'nope'"):
        render("nope")


@pytest.mark.parametrize(
    "name",
    [
        "system",
        "task_cuda",
        "task_triton",
        *(f"feedback_{k}" for k in FEEDBACK_KINDS),
        *(f"hint_{k}" for k in HINT_KINDS),
    ],
)
def test_each_template_renders_with_its_placeholders(name):
    values = {var: f"<{var}>" for var in placeholders(name)}
    text = render(name, **values)
    assert text.strip()
    for var in values:
        assert f"<{var}>" in text
    assert "$" not in text.replace("$$", "")


def test_feedback_templates_end_with_what_to_do_next():
    for kind in FEEDBACK_KINDS:
        last = template_text(f"feedback_{kind}").strip().splitlines()[-1]
        assert "Answer with the whole" in last, kind


@pytest.mark.parametrize("backend", ["cuda", "triton"])
def test_example_parts_are_separate_modules(backend):
    reference, answer = example_parts(backend)
    assert "class Model(" in reference and "ModelNew" not in reference and "ruff" not in reference
    assert "class ModelNew(" in answer and "class Model(" not in answer
    assert answer.startswith("import torch")
    compile(reference, "reference", "exec")
    compile(answer, "answer", "exec")


def test_unknown_example_backend():
    with pytest.raises(PromptError):
        example_parts("opencl")
