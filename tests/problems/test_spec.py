import pytest
from kb_agent.problems import Problem, ProblemError, resolve, resolve_one, toy_problems


def test_level_2_problem_40_by_id(kb_dataset):
    p = resolve_one("2/40")
    assert (p.level, p.problem_id, p.name) == (2, 40, "40_Matmul_Scaling_ResidualAdd")
    assert "class Model" in p.code and p.key == "2/40"


def test_lookup_is_by_id_not_row_position(kb_dataset):
    # rows are sorted by file name, so row 0 of level 1 is 100_HingeLoss
    assert resolve_one("1/1").name == "1_Square_matrix_multiplication_"
    assert resolve_one("1/100").name == "100_HingeLoss"


def test_whole_levels_have_upstream_counts(kb_dataset):
    assert [len(resolve(str(n))) for n in (1, 2, 3, 4)] == [100, 100, 50, 20]
    assert [p.problem_id for p in resolve("3")] == list(range(1, 51))


def test_lists_and_ranges_keep_spec_order(kb_dataset):
    assert [p.key for p in resolve("1/1-3,95")] == ["1/1", "1/2", "1/3", "1/95"]
    assert [p.key for p in resolve(" 1/95, 2 ")] == ["1/95", "1/2"]


def test_several_levels_in_one_spec(kb_dataset):
    # an item with a slash starts the next level's list; ids after it belong to that level
    got = [p.key for p in resolve("1/94-96,2/36,42,toy/relu,1/95")]
    assert got == ["1/94", "1/95", "1/96", "2/36", "2/42", "toy/relu"]
    with pytest.raises(ProblemError, match="bad problem spec '2/x'"):
        resolve("1/1,2/x")


@pytest.mark.parametrize(
    "spec, words",
    [
        ("5/1", "levels: 1, 2, 3, 4"),
        ("2/999", "its ids are 1-100"),
        ("abc", "expected LEVEL/ID"),
        ("1/x", "ids must look like"),
        ("1//3", "ids must look like"),
        ("1/3/4", "ids must look like"),
        ("1/", "no ids after '1/'"),
        ("1/,2/3", "no ids after '1/'"),
        ("1/3,/4", r"no such file or folder: '/4' \(in '1/3,/4'\)"),
        ("1/90-1000", "no problem 101-1000;"),
        ("1/1-100000000", "longer than any level"),
        ("1/9-3", "runs backwards"),
        ("toy/nope", "toy problems: 1_relu"),
        ("", "empty problem spec"),
    ],
)
def test_bad_specs_name_what_exists(kb_dataset, spec, words):
    with pytest.raises(ProblemError, match=words):
        resolve(spec)


def test_file_spec(tmp_path):
    good = tmp_path / "7_mine.py"
    good.write_text(toy_problems()[1].code)
    p = resolve_one(str(good))
    assert (p.level, p.problem_id, p.name) == (None, 7, "7_mine")
    bad = tmp_path / "bad.py"
    bad.write_text("import torch\nclass Model: pass\n")
    with pytest.raises(ProblemError, match="lacks get_inputs, get_init_inputs"):
        resolve(str(bad))
    with pytest.raises(ProblemError, match="no such file"):
        resolve(str(tmp_path / "missing.py"))


def test_paths_keep_their_spaces_folders_hold_problems_and_non_utf8_is_one_line(tmp_path):
    spaced = tmp_path / "my problems"
    spaced.mkdir()
    (spaced / "2_b.py").write_text(toy_problems()[1].code)
    (spaced / "1_a.py").write_text(toy_problems()[2].code)
    assert resolve_one(str(spaced / "1_a.py")).name == "1_a"
    assert [p.name for p in resolve(str(spaced))] == ["1_a", "2_b"]
    with pytest.raises(ProblemError, match="no such file or folder"):
        resolve(str(tmp_path / "nope dir"))
    (tmp_path / "empty").mkdir()
    with pytest.raises(ProblemError, match="no .py files in"):
        resolve(str(tmp_path / "empty"))
    binary = tmp_path / "bin.py"
    binary.write_bytes(b"\xff\xfeclass Model: pass\n")
    with pytest.raises(ProblemError, match="is not UTF-8 text"):
        resolve(str(binary))


def test_a_problem_named_twice_is_resolved_once(kb_dataset):
    assert [p.key for p in resolve("toy/relu,relu,1")] == ["toy/relu"]
    assert [p.key for p in resolve("1/3,1-4")] == ["1/3", "1/1", "1/2", "1/4"]


def test_toy_problems_are_valid_and_addressable():
    toys = toy_problems()
    assert len(toys) >= 5
    assert resolve_one("toy/relu") == resolve_one("toy/1") == resolve_one("0/1")
    # the names the error message lists (`1_relu`) resolve too
    assert resolve_one("toy/1_relu") == resolve_one("toy/relu")
    with pytest.raises(ProblemError, match="toy problems: 1_relu"):
        resolve("toy/nope")
    ns: dict = {}
    exec(toys[3].code, ns)
    assert ns["get_init_inputs"]() == [0.5]


def test_checkout_layout(tmp_path, monkeypatch):
    d = tmp_path / "KernelBench" / "level1"
    d.mkdir(parents=True)
    (d / "12_Thing.py").write_text(toy_problems()[1].code)
    monkeypatch.setenv("KB_DATASET", str(tmp_path))
    p = resolve_one("1/12")
    assert (p.level, p.problem_id, p.name) == (1, 12, "12_Thing")


def test_offline_without_local_copy_says_what_to_do(monkeypatch):
    monkeypatch.delenv("KB_DATASET", raising=False)
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    with pytest.raises(ProblemError, match="KB_DATASET"):
        resolve("2/40")


def test_missing_dataset_folder(tmp_path):
    with pytest.raises(ProblemError, match="does not exist"):
        resolve("1/1", dataset=tmp_path / "nope")


def test_a_dataset_that_is_a_file_is_named_so(tmp_path):
    # it read "does not exist" beside a file that does
    (tmp_path / "level_1.parquet").write_text("")
    with pytest.raises(ProblemError, match="is a file, not a folder"):
        resolve("1/1", dataset=tmp_path / "level_1.parquet")


def test_problem_roundtrip():
    p = toy_problems()[2]
    assert Problem.from_dict(p.to_dict()) == p


def test_unreachable_hub_fails_at_once_with_what_to_do(monkeypatch):
    import socket

    def refuse(*a, **k):
        raise OSError(-2, "Name or service not known")

    monkeypatch.delenv("KB_DATASET", raising=False)
    monkeypatch.delenv("HF_HUB_OFFLINE", raising=False)
    monkeypatch.delenv("HF_DATASETS_OFFLINE", raising=False)
    monkeypatch.setattr(socket, "create_connection", refuse)
    with pytest.raises(ProblemError, match="cannot reach the Hugging Face Hub.*KB_DATASET"):
        resolve("2/40")
