"""What a record says about where it ran: the dataset and code digests."""

import shutil
from pathlib import Path

from kda_trace import environment

ROOT = Path(__file__).resolve().parent.parent


def test_dataset_digest_follows_the_dataset_files(tmp_path):
    """Same files, same digest; a changed workload line changes it; files outside the dataset do not."""
    for sub in ("definitions", "workloads"):
        shutil.copytree(ROOT / sub / "kda", tmp_path / sub / "kda", dirs_exist_ok=True)
    first = environment._digest(tmp_path, environment.DATASET_FILES)
    assert first == environment.dataset_digest(str(ROOT))
    (tmp_path / "notes.txt").write_text("not part of the dataset")
    assert environment._digest(tmp_path, environment.DATASET_FILES) == first
    wl = sorted((tmp_path / "workloads" / "kda").glob("*.jsonl"))[0]
    wl.write_text(wl.read_text().replace('"uuid"', '"uuid" ', 1))
    assert environment._digest(tmp_path, environment.DATASET_FILES) != first


def test_capture_records_both_digests():
    env = environment.capture("cpu", 7, ROOT)
    assert env.seed == 7 and env.hardware
    assert len(env.dataset_digest) == 16 and len(env.code_digest) == 16
    assert env.code_digest == environment.code_digest()
    assert environment.capture("cpu", 7, None).dataset_digest is None


def _git(cwd, *args):
    import subprocess

    subprocess.run(["git", "-C", str(cwd), *args], check=True, capture_output=True,
                   env={"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t", "GIT_COMMITTER_NAME": "t",
                        "GIT_COMMITTER_EMAIL": "t@t", "PATH": __import__("os").environ["PATH"]})


def test_project_commit_is_this_checkouts_and_never_an_enclosing_repository(tmp_path):
    """The package in this checkout names its commit; a copy of the package (and of the project) inside
    another git repository names none: the enclosing repository's commit would be a lie."""
    import subprocess

    head = subprocess.run(["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    if head:  # this test file runs from a git checkout of the project
        assert environment.project_commit(str(ROOT / "kda_trace")).removesuffix("-dirty") == head
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    (other / "README").write_text("another project\n")
    _git(other, "add", "README")
    _git(other, "commit", "-qm", "unrelated")
    # the package copied into the other repository's tree (a vendored copy), committed there
    shutil.copytree(ROOT / "kda_trace", other / "vendor" / "kda_trace", ignore=shutil.ignore_patterns("__pycache__"))
    _git(other, "add", "-A")
    _git(other, "commit", "-qm", "vendor kda_trace")
    assert environment.project_commit(str(other / "vendor" / "kda_trace")) is None
    # the project copied as a whole into a subdirectory: the top level is still the other repository
    project = other / "kda-trace-copy"
    shutil.copytree(ROOT / "kda_trace", project / "kda_trace", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(ROOT / "pyproject.toml", project / "pyproject.toml")
    assert environment.project_commit(str(project / "kda_trace")) is None
    # a repository whose top level holds some other project's pyproject
    (other / "pyproject.toml").write_text('[project]\nname = "something-else"\n')
    shutil.copytree(ROOT / "kda_trace", other / "kda_trace", ignore=shutil.ignore_patterns("__pycache__"))
    assert environment.project_commit(str(other / "kda_trace")) is None
    # the project's own checkout: its commit, -dirty after a change to the package
    own = tmp_path / "own"
    shutil.copytree(project, own)
    _git(own, "init", "-q")
    _git(own, "add", "-A")
    _git(own, "commit", "-qm", "kda-trace")
    own_head = subprocess.run(["git", "-C", str(own), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()
    assert environment.project_commit(str(own / "kda_trace")) == own_head
    (own / "kda_trace" / "__init__.py").write_text("# changed\n")
    environment.project_commit.cache_clear()
    assert environment.project_commit(str(own / "kda_trace")) == own_head + "-dirty"


def test_dataset_revision_of_a_copy_inside_another_repository_is_none(tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    _git(other, "init", "-q")
    (other / "README").write_text("x\n")
    _git(other, "add", "README")
    _git(other, "commit", "-qm", "unrelated")
    for sub in ("definitions", "workloads"):
        shutil.copytree(ROOT / sub / "kda", other / "data" / sub / "kda")
    assert environment.dataset_revision(str(other / "data")) is None
    assert environment.dataset_digest(str(other / "data")) == environment.dataset_digest(str(ROOT))
    _git(other, "add", "-A")
    _git(other, "commit", "-qm", "dataset")
    assert environment.dataset_revision.__wrapped__(str(other / "data"))  # tracked there now: its commit


def test_capture_names_the_device_and_the_project():
    from kda_trace import __version__

    env = environment.capture("cpu", 7, ROOT)
    assert env.device == "cpu" and env.device_uuid is None and env.peaks is None
    assert env.project_version == __version__
    pyproject = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{__version__}"' in pyproject  # the package and its pyproject agree
