"""Hub export / publish / download, offline: export round-trips through `datasets.load_dataset` and
`kda_trace.dataset.load_dataset`; publish is checked with --dry-run, a stand-in HfApi and an unreachable
endpoint; hf:// downloads with a snapshot built in a temporary Hugging Face cache."""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import huggingface_hub
import pytest
import torch
import yaml

from kda_trace import hub
from kda_trace.cli import main
from kda_trace.schema_files import schema_texts
from kda_trace.dataset import is_remote, load_dataset, resolve_root
from kda_trace.inputs import make_inputs
from kda_trace.reference import compile_reference
from kda_trace.schema import Correctness, Environment, Evaluation, EvaluationStatus, Performance, Trace

REPO = Path(__file__).resolve().parent.parent
FIXTURE = Path(__file__).resolve().parent / "fixtures" / "hub_dataset"
ROOTS = [pytest.param(FIXTURE, id="fixture")]
if (REPO / "definitions").is_dir() and any((REPO / "definitions").glob("*/*.json")):
    ROOTS.append(pytest.param(REPO, id="repo"))


def make_run(ds, run_dir: Path) -> Path:
    """A run directory with one trace record per workload of the first two definitions, with a NaN error
    and an infinite speedup in there (the trace format writes them as strings)."""
    env = Environment(hardware="cpu", libs={"torch": torch.__version__}, seed=1)
    for i, name in enumerate(sorted(ds.definitions)[:2]):
        d = ds.definitions[name]
        records = []
        for j, w in enumerate(ds.workloads_of(name)):
            passed = (i + j) % 2 == 0
            ev = Evaluation(
                status=EvaluationStatus.PASSED if passed else EvaluationStatus.INCORRECT_NUMERICAL,
                environment=env, timestamp="2026-11-22T18:00:00Z",
                correctness=Correctness(max_relative_error=1e-3 if passed else float("nan"), max_absolute_error=2e-4),
                performance=Performance(latency_ms=0.5, reference_latency_ms=1.0,
                                        speedup_factor=2.0 if passed else float("inf"), mode="cpu_wall"))
            records.append(Trace(definition=name, workload=w, solution="reference", evaluation=ev))
        path = run_dir / "traces" / d.op_type / f"{name}.jsonl"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(r.model_dump_json(exclude_none=True) + "\n" for r in records))
    return run_dir


@pytest.fixture(scope="module", params=ROOTS)
def exported(request, tmp_path_factory):
    """(source root, source Dataset, run dir, Export) for each dataset root."""
    root = request.param
    ds = load_dataset(root)
    assert not ds.problems, ds.problems
    tmp = tmp_path_factory.mktemp("hub")
    run_dir = make_run(ds, tmp / "run")
    export = hub.export_dataset(root, tmp / "out", traces_dir=run_dir, repo_id="kda-org/kda-trace")
    return root, ds, run_dir, export


def front_matter(readme: Path) -> dict:
    text = readme.read_text()
    assert text.startswith("---\n")
    return yaml.safe_load(text.split("---\n", 2)[1])


# --------------------------------------------------------------------------- export


def test_export_writes_hub_layout(exported):
    root, ds, run_dir, export = exported
    out = export.out_dir
    expected = {"README.md", *(f"schemas/{n}" for n in schema_texts()),
                "tables/definitions.jsonl", "tables/workloads.jsonl", "tables/traces.jsonl"}
    expected |= set(ds.definition_files.values())
    expected |= {e.file for entries in ds.workloads.values() for e in entries}
    expected |= {f"traces/{p.relative_to(run_dir / 'traces').as_posix()}" for p in (run_dir / "traces").rglob("*.jsonl")}
    assert set(export.files) == expected
    assert export.files == sorted(p.relative_to(out).as_posix() for p in out.rglob("*") if p.is_file())
    for rel in ds.definition_files.values():  # dataset files are copied byte for byte
        assert (out / rel).read_bytes() == (root / rel).read_bytes()
    for name, text in schema_texts().items():
        assert (out / "schemas" / name).read_text() == text
    assert (export.definitions, export.workloads) == (len(ds.definitions), sum(len(v) for v in ds.workloads.values()))
    assert export.traces == sum(len(ds.workloads_of(n)) for n in sorted(ds.definitions)[:2])


def test_card_declares_every_table_and_lists_every_definition(exported):
    _, ds, _, export = exported
    meta = front_matter(export.out_dir / "README.md")
    assert meta["license"] == "apache-2.0"
    configs = {c["config_name"]: c for c in meta["configs"]}
    assert set(configs) == {"definitions", "workloads", "traces"}
    assert configs["definitions"].get("default") is True
    for name, c in configs.items():
        assert c["data_files"] == [{"split": "train", "path": f"tables/{name}.jsonl"}]
    infos = {i["config_name"]: i["features"] for i in meta["dataset_info"]}
    assert infos == {name: hub.table_features(name) for name in configs}
    # the Hub's own card parser reads the same metadata
    card = huggingface_hub.DatasetCard.load(export.out_dir / "README.md")
    assert [c["config_name"] for c in card.data.configs] == ["definitions", "workloads", "traces"]
    body = (export.out_dir / "README.md").read_text()
    for d in ds.definitions.values():
        assert f"| `{d.name}` | {d.op_type} |" in body
        for model in d.tag_values.get("model", []):
            assert model in body
    assert "kda-trace run --dataset hf://kda-org/kda-trace" in body
    assert "@misc{kda_trace" in body and "Apache-2.0" in body


def _source_workload_lines(root: Path, ds):
    for name in sorted(ds.workloads):
        for e in ds.workloads[name]:
            yield name, e, json.loads((root / e.file).read_text().splitlines()[e.line - 1])


def test_every_table_loads_with_datasets_and_matches_the_files(exported, tmp_path):
    import datasets

    root, ds, run_dir, export = exported
    loaded = {c: datasets.load_dataset(str(export.out_dir), c, split="train", cache_dir=str(tmp_path / "cache"))
              for c in ("definitions", "workloads", "traces")}
    for config, table in loaded.items():
        assert table.column_names == [n for n, _ in hub.TABLE_COLUMNS[config]]
        assert datasets.Features._from_yaml_list(hub.table_features(config)) == table.features

    defs = loaded["definitions"]
    assert defs["name"] == sorted(ds.definitions)
    for row in defs:
        raw = json.loads((root / row["file"]).read_text())
        assert row["file"] == ds.definition_files[row["name"]]
        for key in ("axes", "inputs", "outputs"):
            assert json.loads(row[key]) == raw[key]
        assert (json.loads(row["inplace"]) if row["inplace"] else None) == raw.get("inplace")
        assert (json.loads(row["cost"]) if row["cost"] else None) == raw.get("cost")
        for key in ("name", "op_type", "reference"):
            assert row[key] == raw[key]
        assert row["tags"] == raw.get("tags", []) and row["constraints"] == raw.get("constraints", [])
        assert row["description"] == raw.get("description")
        assert row["models"] == [t.split(":", 1)[1] for t in raw.get("tags", []) if t.startswith("model:")]
        assert row["num_workloads"] == len(ds.workloads_of(row["name"]))

    wls = list(loaded["workloads"])
    source = list(_source_workload_lines(root, ds))
    assert len(wls) == len(source)
    for row, (name, entry, raw) in zip(wls, source):
        assert (row["definition"], row["file"], row["line"]) == (name, entry.file, entry.line)
        rebuilt = {"uuid": row["uuid"], "axes": json.loads(row["axes"]), "inputs": json.loads(row["inputs"])}
        for key, empty in (("seq_lens", None), ("tags", []), ("description", None)):
            if key in raw or row[key] != empty:
                rebuilt[key] = row[key]
        assert rebuilt == raw

    traces = list(loaded["traces"])
    lines = [(f"traces/{p.relative_to(run_dir / 'traces').as_posix()}", i + 1, json.loads(t))
             for p in sorted((run_dir / "traces").rglob("*.jsonl")) for i, t in enumerate(p.read_text().splitlines())]
    assert [(r["file"], r["line"]) for r in traces] == [(f, n) for f, n, _ in lines]
    for row, (_, _, raw) in zip(traces, lines):
        assert row["definition"] == raw["definition"] and row["solution"] == raw["solution"]
        assert json.loads(row["workload"]) == raw["workload"]
        assert json.loads(row["evaluation"]) == raw["evaluation"]
        assert row["workload_uuid"] == raw["workload"]["uuid"] and row["status"] == raw["evaluation"]["status"]
        rel = raw["evaluation"]["correctness"]["max_relative_error"]
        assert row["max_relative_error"] == (None if rel == "NaN" else rel)  # non-finite -> null in the table
        speedup = raw["evaluation"]["performance"]["speedup_factor"]
        assert row["speedup_factor"] == (None if speedup == "Infinity" else speedup)


def test_exported_copy_loads_as_the_same_dataset(exported):
    _, ds, _, export = exported
    copy = load_dataset(export.out_dir)
    assert copy.problems == []
    assert copy.definitions == ds.definitions
    assert copy.definition_files == ds.definition_files
    for name in ds.definitions:
        assert copy.workloads_of(name) == ds.workloads_of(name)


def test_smoke_workload_runs_from_the_exported_copy(exported):
    """The smallest smoke workload, run from the export, gives bit-identical outputs to the source."""
    root, ds, _, export = exported
    copy = load_dataset(export.out_dir)

    def size(item):
        return sum(item[1].axes.values())

    smoke = [(d, w) for d in copy.definitions.values() for w in copy.workloads_of(d.name) if "smoke" in w.tags]
    assert smoke, "the dataset has no smoke workload"
    d, w = min(smoke, key=size)
    run = compile_reference(d.reference, d.name)  # untrusted: the allowlist check applies
    got = run(**make_inputs(d, w, root=export.out_dir))
    source = ds.definitions[d.name]
    want = compile_reference(source.reference, d.name)(**make_inputs(source, w, root=root))
    got, want = (got if isinstance(got, tuple) else (got,)), (want if isinstance(want, tuple) else (want,))
    assert len(got) == len(d.outputs)
    axes = {**d.const_axes, **w.axes}
    for (out_name, spec), g, ref in zip(d.outputs.items(), got, want):
        assert list(g.shape) == d.shape_of(spec, axes), out_name
        assert torch.equal(g, ref), out_name


def copy_fixture(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    shutil.copytree(FIXTURE, root)
    return root


def test_export_refuses_an_invalid_dataset(tmp_path, capsys):
    root = copy_fixture(tmp_path)
    path = root / "workloads" / "kda" / "kda_gate_h2_d8.jsonl"
    lines = path.read_text().splitlines()
    lines[1] = lines[1].replace('"num_tokens": 1', '"num_tokens": 1, "bogus": 3')
    path.write_text("\n".join(lines) + "\n")
    assert main(["export", str(tmp_path / "out"), "--dataset", str(root)]) == 1
    err = capsys.readouterr().err
    assert "workloads/kda/kda_gate_h2_d8.jsonl: line 2, field axes.bogus" in err
    assert "nothing was exported" in err and "Traceback" not in err
    assert not (tmp_path / "out").exists()


def test_export_refuses_a_non_empty_directory(tmp_path, capsys):
    (tmp_path / "out").mkdir()
    (tmp_path / "out" / "keep.txt").write_text("mine")
    assert main(["export", str(tmp_path / "out"), "--dataset", str(FIXTURE)]) == 1
    assert "not an empty directory" in capsys.readouterr().err
    assert [p.name for p in (tmp_path / "out").iterdir()] == ["keep.txt"]


def test_export_refuses_traces_of_unknown_workloads(tmp_path, capsys):
    ds = load_dataset(FIXTURE)
    run_dir = make_run(ds, tmp_path / "run")
    path = next((run_dir / "traces").rglob("*.jsonl"))
    lines = path.read_text().splitlines()
    lines.append(lines[0].replace('"uuid":"fix-', '"uuid":"gone-'))
    lines.append("{not json")
    path.write_text("\n".join(lines) + "\n")
    assert main(["export", str(tmp_path / "out"), "--dataset", str(FIXTURE), "--traces", str(run_dir)]) == 1
    err = capsys.readouterr().err
    rel = f"run/traces/{path.relative_to(run_dir / 'traces').as_posix()}"
    assert f"{rel}: line {len(lines) - 1}, field workload.uuid" in err
    assert f"{rel}: line {len(lines)}: not valid JSON" in err
    assert not (tmp_path / "out").exists()


def test_export_carries_safetensors_inputs(tmp_path):
    from safetensors.torch import save_file

    root = copy_fixture(tmp_path)
    stored = torch.randn(3, 2, 8).to(torch.bfloat16)
    (root / "blobs").mkdir()
    save_file({"g_raw": stored}, str(root / "blobs" / "gate.safetensors"))
    line = {"uuid": "fix-gate-stored", "axes": {"num_tokens": 3},
            "inputs": {"g_raw": {"type": "safetensors", "path": "blobs/gate.safetensors", "tensor_key": "g_raw"},
                       "A_log": {"type": "random"}, "dt_bias": {"type": "random"}}}
    with open(root / "workloads" / "kda" / "kda_gate_h2_d8.jsonl", "a") as f:
        f.write(json.dumps(line) + "\n")
    export = hub.export_dataset(root, tmp_path / "out")
    assert "blobs/gate.safetensors" in export.files
    copy = load_dataset(export.out_dir)
    d = copy.definitions["kda_gate_h2_d8"]
    w = next(w for w in copy.workloads_of(d.name) if w.uuid == "fix-gate-stored")
    assert torch.equal(make_inputs(d, w, root=export.out_dir)["g_raw"], stored)

    (root / "blobs" / "gate.safetensors").unlink()
    with pytest.raises(hub.HubError, match=r"kda_gate_h2_d8.jsonl: line 3, field inputs.g_raw.path"):
        hub.export_dataset(root, tmp_path / "out2")


# --------------------------------------------------------------------------- publish


def test_publish_dry_run_lists_exactly_the_exported_files(tmp_path, capsys):
    ds = load_dataset(FIXTURE)
    run_dir = make_run(ds, tmp_path / "run")
    export = hub.export_dataset(FIXTURE, tmp_path / "out", traces_dir=run_dir, repo_id="kda-org/kda-trace")
    code = main(["publish", "--repo-id", "kda-org/kda-trace", "--dataset", str(FIXTURE), "--traces", str(run_dir),
                 "--dry-run"])
    captured = capsys.readouterr()
    assert code == 0
    assert captured.out.splitlines() == export.files
    assert "would upload 16 files" in captured.err and "kda-org/kda-trace" in captured.err


class FakeHfApi:
    """Stands in for huggingface_hub.HfApi at the boundary (huggingface_hub offers no local Hub server):
    records the calls and what the uploaded folder held at the time."""

    endpoint = "https://fake.invalid"

    def __init__(self):
        self.calls = []

    def create_repo(self, repo_id, **kwargs):
        self.calls.append(("create_repo", repo_id, kwargs))

    def create_branch(self, repo_id, **kwargs):
        self.calls.append(("create_branch", repo_id, kwargs))

    def upload_folder(self, **kwargs):
        folder = Path(kwargs["folder_path"])
        self.files = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        self.card = (folder / "README.md").read_text()
        self.calls.append(("upload_folder", kwargs["repo_id"], kwargs))
        return SimpleNamespace(commit_url="https://fake.invalid/commit/1", pr_url=None)


def test_publish_uploads_the_export(tmp_path, capsys):
    api = FakeHfApi()
    lines = []
    assert hub.publish(FIXTURE, "kda-org/kda-trace", revision="v1", private=True, api=api, out=lines.append) == 0
    names = [c[0] for c in api.calls]
    assert names == ["create_repo", "create_branch", "upload_folder"]
    assert api.calls[0][1:] == ("kda-org/kda-trace", {"repo_type": "dataset", "exist_ok": True, "private": True})
    assert api.calls[1][2] == {"repo_type": "dataset", "branch": "v1", "exist_ok": True}
    upload = api.calls[2][2]
    assert upload["repo_type"] == "dataset" and upload["revision"] == "v1" and upload["create_pr"] is False
    assert upload["delete_patterns"] == [f"{d}/*" for d in hub.MANAGED_DIRS]
    export = hub.export_dataset(FIXTURE, tmp_path / "out", repo_id="kda-org/kda-trace")
    assert api.files == export.files
    assert api.card == (export.out_dir / "README.md").read_text()
    assert "https://fake.invalid/commit/1" in lines[-1]
    assert not Path(upload["folder_path"]).exists()  # the temporary export is gone


def test_publish_pull_request(tmp_path):
    api = FakeHfApi()
    assert hub.publish(FIXTURE, "kda-org/kda-trace", create_pr=True, api=api, out=lambda s: None) == 0
    assert [c[0] for c in api.calls] == ["create_repo", "upload_folder"]
    assert api.calls[1][2]["create_pr"] is True and api.calls[1][2]["revision"] is None
    with pytest.raises(hub.HubError, match="--create-pr"):
        hub.publish(FIXTURE, "kda-org/kda-trace", create_pr=True, revision="dev", api=api)


def test_publish_without_a_token_is_one_message(tmp_path, monkeypatch, capsys):
    for var in ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN", "HF_OIDC_RESOURCE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setattr(huggingface_hub.constants, "HF_TOKEN_PATH", str(tmp_path / "no-token"))
    assert main(["publish", "--repo-id", "kda-org/kda-trace", "--dataset", str(FIXTURE)]) == 1
    err = capsys.readouterr().err
    assert "no Hugging Face token: set HF_TOKEN or run `hf auth login`" in err and "Traceback" not in err


@pytest.mark.parametrize("offline", [False, True], ids=["unreachable", "HF_HUB_OFFLINE"])
def test_publish_without_network_is_one_message(offline, monkeypatch, capsys):
    monkeypatch.setenv("HF_TOKEN", "hf_not_a_real_token")
    monkeypatch.setattr(huggingface_hub.constants, "ENDPOINT", "http://127.0.0.1:9")  # nothing listens
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    assert main(["publish", "--repo-id", "kda-org/kda-trace", "--dataset", str(FIXTURE)]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("kda-trace publish: kda-org/kda-trace: cannot reach http://127.0.0.1:9 to upload")
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize("repo_id, message", [("kda-trace", "must be ORG/NAME"),
                                              ("kda org/x", "invalid repository id 'kda org/x'")])
def test_publish_refuses_a_bad_repo_id(repo_id, message, capsys):
    assert main(["publish", "--repo-id", repo_id, "--dataset", str(FIXTURE), "--dry-run"]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"kda-trace publish: --repo-id {repo_id!r}: ") and message in err


# --------------------------------------------------------------------------- hf:// datasets


@pytest.mark.parametrize("spec, repo_id, revision", [
    ("hf://kda-org/kda-trace", "kda-org/kda-trace", None),
    ("hf://kda-org/kda-trace@v1.0", "kda-org/kda-trace", "v1.0"),
    ("hf://datasets/kda-org/kda-trace@refs/pr/3", "kda-org/kda-trace", "refs/pr/3"),
    ("hf://kda-org/kda-trace@" + "a" * 40, "kda-org/kda-trace", "a" * 40),
])
def test_parse_spec(spec, repo_id, revision):
    assert hub.parse_spec(spec) == hub.HubSpec(repo_id, revision)


@pytest.mark.parametrize("spec, message", [
    ("hf://kda-trace", "must be ORG/NAME"),
    ("hf://a/b/c", "must be ORG/NAME"),
    ("hf://kda-org/kda-trace@", "empty revision"),
    ("hf://kda org/x", "invalid repository id"),
    ("hf://", "must be ORG/NAME"),
    ("kda-org/kda-trace", "not a Hub dataset"),
])
def test_parse_spec_refuses(spec, message):
    with pytest.raises(hub.HubError, match=message):
        hub.parse_spec(spec)


def fake_cached_snapshot(cache: Path, repo_id: str, content: Path, commit: str = "c" * 40) -> Path:
    """What snapshot_download leaves in a Hugging Face cache: refs/main -> commit, snapshots/<commit>/."""
    repo_dir = cache / f"datasets--{repo_id.replace('/', '--')}"
    (repo_dir / "refs").mkdir(parents=True)
    (repo_dir / "refs" / "main").write_text(commit)
    shutil.copytree(content, repo_dir / "snapshots" / commit)
    return repo_dir / "snapshots" / commit


def test_hf_dataset_from_the_cache_offline(tmp_path, monkeypatch):
    export = hub.export_dataset(FIXTURE, tmp_path / "out")
    cache = tmp_path / "hf-cache"
    snapshot = fake_cached_snapshot(cache, "kda-org/kda-trace", export.out_dir)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(cache))
    spec = "hf://kda-org/kda-trace"
    assert is_remote(spec) and not is_remote(str(FIXTURE))
    root = resolve_root(spec)
    assert root.resolve() == snapshot.resolve()
    ds = load_dataset(root)
    assert ds.problems == [] and ds.definitions == load_dataset(FIXTURE).definitions
    assert hub.download_dataset(f"{spec}@{'c' * 40}").resolve() == snapshot.resolve()
    with pytest.raises(hub.HubError, match="offline"):
        hub.download_dataset(f"{spec}@v2")


def test_hf_dataset_offline_without_a_copy_is_one_message(tmp_path, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    with pytest.raises(hub.HubError) as e:
        hub.download_dataset("hf://kda-org/nowhere", cache_dir=tmp_path)
    assert str(e.value).startswith("dataset hf://kda-org/nowhere: the Hub cannot be reached (offline")


def test_cli_with_hf_dataset_offline_gives_one_line(tmp_path):
    """The real environment variable, through the console entry point: one line on stderr, exit 1."""
    env = {"HF_HUB_OFFLINE": "1", "HF_HOME": str(tmp_path / "hf"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, "-m", "kda_trace.cli", "list", "--dataset", "hf://kda-org/nowhere@v1"],
                          capture_output=True, text=True, env=env, cwd=REPO, timeout=120, check=False)
    assert done.returncode == 1
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kda-trace list: dataset hf://kda-org/nowhere@v1: the Hub cannot")


@pytest.mark.skipif(importlib.util.find_spec("kda_trace.run_command") is None, reason="the runner is not there yet")
@pytest.mark.slow  # a `kda-trace run` of its own
def test_runner_on_the_exported_copy_and_its_traces_exported(tmp_path):
    """`kda-trace run` on an exported copy, then `export --traces` of that run: the traces table holds
    exactly the runner's records."""
    import datasets

    export = hub.export_dataset(FIXTURE, tmp_path / "out")
    run_dir = tmp_path / "run"
    code = main(["run", "--dataset", str(export.out_dir), "--solution", "reference", "--device", "cpu",
                 "--definition", "kda_gate_h2_d8", "--size", "all", "--out", str(run_dir)])
    assert code == 0
    path = run_dir / "traces" / "kda" / "kda_gate_h2_d8.jsonl"
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert sorted(r["workload"]["uuid"] for r in records) == ["fix-gate-1", "fix-gate-2"]
    assert {r["evaluation"]["status"] for r in records} == {"PASSED"}

    again = hub.export_dataset(FIXTURE, tmp_path / "out2", traces_dir=run_dir)
    assert "traces/kda/kda_gate_h2_d8.jsonl" in again.files and again.traces == 2
    table = datasets.load_dataset(str(again.out_dir), "traces", split="train", cache_dir=str(tmp_path / "cache"))
    assert [json.loads(e) for e in table["evaluation"]] == [r["evaluation"] for r in records]
    assert table["workload_uuid"] == [r["workload"]["uuid"] for r in records]
    assert table["status"] == ["PASSED", "PASSED"] and table["solution"] == ["reference", "reference"]
    assert all(x is not None and x >= 0 for x in table["latency_ms"])
