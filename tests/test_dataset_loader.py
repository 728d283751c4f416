"""The loader and `kda-trace validate`: the repo's dataset passes, every kind of bad input is named."""

import json
from pathlib import Path

import pytest

from kda_trace.cli import main
from kda_trace.dataset import load_dataset

FIXTURES = Path(__file__).parent / "fixtures"
BAD = FIXTURES / "bad_dataset"
REPO = Path(__file__).resolve().parent.parent

# (file, where, words of the message) for each bad input planted in the fixture dataset
EXPECTED_PROBLEMS = [
    ("definitions/toy/not_json.json", "line 2", "not valid JSON"),
    ("definitions/toy/bad_dtype.json", "field inputs.x.dtype", "'float128' is not one of"),
    ("definitions/toy/bad_axis.json", "field outputs.y.shape", "axis 'k' is not declared"),
    ("definitions/toy/wrong_file_name.json", "field name", "does not match the file name"),
    ("definitions/toy/dup.json", "field name", "also defined in definitions/other/dup.json"),
    ("definitions/toy/syntax_error.json", "field reference", "syntax error at line 1"),
    ("definitions/toy/no_run.json", "field reference", "no top-level function named 'run'"),
    ("definitions/toy/bad_constraint.json", "field constraints[0]", "not a valid Python expression"),
    ("workloads/toy/good.jsonl", "line 2", "not valid JSON"),
    ("workloads/toy/good.jsonl", "line 3, field uuid", "duplicate uuid 'good-1'"),
    ("workloads/toy/good.jsonl", "line 4, field axes.n", "missing value for var axis 'n'"),
    ("workloads/toy/good.jsonl", "line 5, field axes.m", "not an axis of the definition"),
    ("workloads/toy/good.jsonl", "line 6, field constraints[0]", "'n >= 1' does not hold (n=0)"),
    ("workloads/toy/good.jsonl", "line 7, field inputs.x", "a scalar value for a tensor input"),
    ("workloads/toy/no_such_definition.jsonl", "", "no valid definition named 'no_such_definition'"),
]


@pytest.fixture(scope="module")
def bad():
    return load_dataset(BAD)


@pytest.mark.parametrize("file,where,words", EXPECTED_PROBLEMS, ids=[f"{f}:{w}" for f, w, _ in EXPECTED_PROBLEMS])
def test_each_bad_input_is_named(bad, file, where, words):
    matches = [p for p in bad.problems if p.file == file and p.where == where and words in p.message]
    assert matches, f"no problem {file}: {where}: ...{words}...; got:\n" + "\n".join(map(str, bad.problems))


def test_no_unexpected_problems_and_good_content_still_loads(bad):
    assert len(bad.problems) == len(EXPECTED_PROBLEMS), "\n".join(map(str, bad.problems))
    # the valid definitions and the valid lines around the bad ones are kept
    assert set(bad.definitions) == {"good", "dup"}
    assert [w.uuid for w in bad.workloads_of("good")] == ["good-1", "good-2"]


def test_validate_reports_all_and_fails(bad, capsys):
    assert main(["validate", str(BAD)]) == 1
    out = capsys.readouterr().out
    lines = out.splitlines()
    for file, where, words in EXPECTED_PROBLEMS:
        prefix = f"{file}: {where}: " if where else f"{file}: "
        assert any(line.startswith(prefix) and words in line for line in lines), (prefix, words)


def test_repo_dataset_validates(capsys):
    assert main(["validate", str(REPO)]) == 0, capsys.readouterr()


def test_list_filters(capsys):
    assert main(["list", "--dataset", str(BAD), "--op-type", "toy", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)
    assert [(r["name"], r["workloads"]) for r in rows] == [("good", 2)]
    assert main(["list", "--dataset", str(BAD), "--name", "dup", "--json"]) == 0
    assert [(r["name"], r["op_type"]) for r in json.loads(capsys.readouterr().out)] == [("dup", "other")]
    assert main(["list", "--dataset", str(BAD), "--tag", "no-such-tag", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == []


def test_missing_root_is_one_problem(tmp_path):
    ds = load_dataset(tmp_path / "nowhere")
    assert len(ds.problems) == 1 and "does not exist" in ds.problems[0].message
