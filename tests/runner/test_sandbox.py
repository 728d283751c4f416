"""Solutions that reach outside their process, in the sandbox of kda_trace/sandbox.py, on the
CPU: each attempt of tests/runner/sandbox_attacks.py fails (its record PASSED, as it answers honestly when its
attempt failed), leaves nothing behind, and an honest solution of the same run passes."""

import os
import socket
import threading
from pathlib import Path

import pytest

from test_cheats import statuses  # records by solution name, from a run's trace files

from kda_trace import sandbox
from kda_trace.cli import main

HERE = Path(__file__).parent
DS = str(HERE / "fixtures" / "ds")
ATTACKS = str(HERE / "sandbox_attacks.py")
NAMES = ("kills_others", "leaves_a_spinning_child", "reads_judge_memory", "writes_outside_scratch", "opens_a_socket")

needs_sandbox = pytest.mark.skipif(sandbox.sandbox_support() != sandbox.SANDBOXED,
                                   reason=f"no sandbox here ({sandbox.sandbox_support()})")


def test_the_isolation_is_recorded():
    from kda_trace import environment

    env = environment.capture("cpu", 0, DS)
    assert env.isolation == sandbox.sandbox_support()
    assert env.isolation == sandbox.SANDBOXED or env.isolation.startswith("none: ")


def test_a_sandbox_turned_off_says_so(monkeypatch):
    monkeypatch.setenv(sandbox.SANDBOX_ENV, "off")
    assert sandbox.sandbox_support() == f"none: turned off ({sandbox.SANDBOX_ENV}=off)"


@pytest.fixture(scope="module")
def attacked(tmp_path_factory):
    out = tmp_path_factory.mktemp("sandbox")
    target = out / "outside_scratch.txt"
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(8)
    server.settimeout(0.2)
    connected = []

    def accept():
        while not stop.is_set():
            try:
                connected.append(server.accept())
            except OSError:
                pass

    stop = threading.Event()
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    mp = pytest.MonkeyPatch()
    mp.setenv("SANDBOX_TARGET_FILE", str(target))
    mp.setenv("SANDBOX_TARGET_PORT", str(server.getsockname()[1]))
    argv = ["run", "--dataset", DS, "--workers", "1", "--definition", "toy_scan", "--size", "all", "--timeout", "60",
            "--out", str(out / "run"), "--solution", f"{ATTACKS}::kills_others"]
    for name in NAMES[1:]:
        argv += ["--solution", f"{ATTACKS}::{name}"]
    argv += ["--solution", f"{ATTACKS}::kills_others"]  # (a second one: a sibling to kill)
    argv += ["--solution", str(HERE / "bad_solutions.py") + "::good"]
    try:
        code = main(argv)
    finally:
        mp.undo()
        stop.set()
        thread.join()
        server.close()
    spinners = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if b"sandbox_attacks spinner" in Path(f"/proc/{pid}/cmdline").read_bytes():
                spinners.append(pid)
        except OSError:
            pass
    return {"code": code, "records": statuses(out / "run"), "target": target, "connected": connected,
            "spinners": spinners}


@needs_sandbox
def test_an_honest_solution_beside_the_attempts_passes(attacked):
    assert [ev["status"] for ev in attacked["records"]["good"]] == ["PASSED"] * 3
    assert attacked["code"] == 0


@needs_sandbox
@pytest.mark.parametrize("name", NAMES)
def test_each_attempt_fails_in_the_sandbox(attacked, name):
    got = attacked["records"][name]
    assert got and [ev["status"] for ev in got] == ["PASSED"] * len(got), [ev["log"][:200] for ev in got]
    assert all(ev["environment"]["isolation"] == sandbox.SANDBOXED for ev in got)


@needs_sandbox
def test_nothing_outside_the_sandbox_was_reached(attacked):
    assert not attacked["target"].exists()
    assert not attacked["connected"]
    assert not attacked["spinners"]  # the spinning child died with its solution's process
