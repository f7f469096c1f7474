"""infra/stack.py's process bookkeeping: which component runs, without signalling a
process that is not ours."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import stack_module

stack = stack_module()
SLEEPER = "import time; time.sleep(60)"


def spawn(env: dict[str, str]) -> subprocess.Popen[bytes]:
    return subprocess.Popen([sys.executable, "-c", SLEEPER], env=env)


def test_a_process_is_recognised_by_its_tag_from_the_moment_it_is_started() -> None:
    # right after Popen returns, the kernel may not have placed the child's environment
    # yet (it reads as empty): a component just started must not look exited
    env = dict(os.environ, **{stack.TAG: "audit"})
    missed = 0
    for _ in range(200):
        proc = spawn(env)
        try:
            missed += not stack._tagged(proc.pid, "audit")
        finally:
            proc.kill()
            proc.wait()
    assert missed == 0


def test_another_component_a_zombie_and_a_stranger_are_not_recognised() -> None:
    tagged = spawn(dict(os.environ, **{stack.TAG: "audit"}))
    stranger = spawn({k: v for k, v in os.environ.items() if k != stack.TAG})
    try:
        assert stack._tagged(tagged.pid, "audit")
        assert not stack._tagged(tagged.pid, "registrar")
        assert not stack._tagged(stranger.pid, "audit")
        tagged.send_signal(signal.SIGKILL)
        os.waitid(os.P_PID, tagged.pid, os.WEXITED | os.WNOWAIT)  # dead, not reaped
        assert not stack._tagged(tagged.pid, "audit")
    finally:
        for proc in (tagged, stranger):
            proc.kill()
            proc.wait()


def fake_python(tmp_path: Path) -> str:
    """An interpreter stand-in that ignores `-m module` and sleeps, so the Stack's
    bookkeeping is tested without Kafka or Cassandra."""
    script = tmp_path / "python"
    script.write_text(f"#!/bin/sh\nexec {sys.executable} -c '{SLEEPER}'\n")
    script.chmod(0o755)
    return str(script)


def test_a_started_component_runs_until_killed_and_another_stack_can_stop_it(
    tmp_path: Path,
) -> None:
    python = fake_python(tmp_path)
    ours = stack.Stack(tmp_path / "run", python=python)
    pid = ours.start("audit")
    assert ours.pid("audit") == pid
    assert ours.start("audit") == pid  # already running: not started twice
    ours.kill("audit")
    assert ours.pid("audit") is None

    pid = ours.start("decay")
    # `make down` is another process: it finds the component by its PID file and tag
    other = stack.Stack(tmp_path / "run", python=python)
    assert other.pid("decay") == pid
    assert other.pid("audit") is None
    other.stop("decay", timeout=10)
    assert ours.pid("decay") is None
    assert not (tmp_path / "run" / "decay.pid").exists()


def test_down_from_another_invocation_stops_the_replicas_a_scale_out_started(
    tmp_path: Path,
) -> None:
    python = fake_python(tmp_path)
    ours = stack.Stack(tmp_path / "run", python=python)
    ours.replicas["decay"] = 2
    ours.ports["decay-2"] = stack.free_port()
    first, second = ours.start("decay"), ours.start("decay-2")
    other = stack.Stack(tmp_path / "run", python=python)  # `make down`: one replica each
    assert [c.name for c in other.components()].count("decay") == 1
    other.down()
    assert ours.pid("decay") is None
    assert ours.pid("decay-2") is None
    assert not (tmp_path / "run" / "decay-2.pid").exists()
    assert first != second


def test_a_component_whose_port_another_process_holds_is_not_started(tmp_path: Path) -> None:
    """What answered there (a `make run` left running) would pass the readiness probe in
    the component's place."""
    holder = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    try:
        ours = stack.Stack(tmp_path / "run", python=fake_python(tmp_path))
        ours.ports["decay"] = port
        with pytest.raises(stack.StackError, match=f"port {port} .* already in use"):
            ours.start("decay")
        assert ours.pid("decay") is None
        assert not (tmp_path / "run" / "decay.pid").exists()
    finally:
        holder.close()
    pid = ours.start("decay")  # free again: it starts
    try:
        assert ours.pid("decay") == pid
    finally:
        ours.kill("decay")


def test_the_stack_is_distributed_whatever_the_shell_exports(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MNEMO_MODE", "embedded")
    server = stack.Stack(tmp_path, {"MNEMO_QDRANT_URL": "http://127.0.0.1:6333"})
    for component in server.components():
        assert server.child_env(component)["MNEMO_MODE"] == "distributed", component.name


def test_a_port_is_handed_out_once_per_process() -> None:
    # nothing listens on a port until its server starts: two calls must not both find the
    # same one free (500 random draws from ~22,000 ports would repeat one almost surely)
    ports = [stack.free_port() for _ in range(500)]
    assert len(set(ports)) == len(ports)


def test_replicas_of_a_consumer_are_components_with_ports_of_their_own(tmp_path: Path) -> None:
    server = stack.Stack(tmp_path, {"MNEMO_QDRANT_URL": "http://127.0.0.1:6333"})
    server.replicas = {"registrar": 3, "indexer": 2}
    names = [c.name for c in server.components()]
    assert names.count("gateway") == 1
    assert {"registrar", "registrar-2", "registrar-3", "indexer", "indexer-2"} <= set(names)
    assert "decay-2" not in names
    ports = [c.health_port for c in server.components() if c.name != "gateway"]
    assert len(ports) == len(set(ports)), "every consumer process has its own health port"
    # the same replica keeps its port from one listing to the next
    assert (
        server.component("registrar-3").health_port == server.component("registrar-3").health_port
    )
    # the gateway's status page lists each consumer once, not each process
    listed = server.child_env(server.component("gateway"))["MNEMO_GATEWAY_COMPONENTS"]
    assert "registrar-2" not in listed
    assert "registrar=" in listed
    # without a Qdrant server the indexer lives in the gateway: it has no replicas to add
    co_located = stack.Stack(tmp_path, {"MNEMO_QDRANT_URL": ""})
    co_located.replicas = {"indexer": 2}
    assert "indexer-2" not in [c.name for c in co_located.components()]
    with pytest.raises(stack.StackError):
        co_located.scale("indexer", 2)


def test_a_replica_listens_on_its_own_health_port_when_the_consumers_ports_are_set(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`infra/stack.py up` takes the consumers' health ports from MNEMO_<CONSUMER>_HEALTH_PORT,
    and a consumer reads that variable over MNEMO_HEALTH_PORT: a replica given only
    MNEMO_HEALTH_PORT would bind its first process's port and exit."""
    monkeypatch.setenv("MNEMO_REGISTRAR_HEALTH_PORT", "18491")
    monkeypatch.setenv("MNEMO_DECAY_HEALTH_PORT", "18493")
    server = stack.Stack(
        tmp_path,
        {"MNEMO_QDRANT_URL": "http://127.0.0.1:6333"},
        ports={**stack.CONSUMER_PORTS, "registrar": 18491, "decay": 18493},
    )
    server.replicas = {"registrar": 2}
    for name in ("registrar", "registrar-2", "decay", "indexer"):
        component = server.component(name)
        env = server.child_env(component)
        consumer = name.split("-")[0].upper()
        assert env["MNEMO_HEALTH_PORT"] == str(component.health_port)
        assert env[f"MNEMO_{consumer}_HEALTH_PORT"] == str(component.health_port), name
    assert server.component("registrar-2").health_port != 18491


def test_check_refuses_a_misspelt_setting_before_anything_starts(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("MNEMO_GATEWAY_PROT", "2")
    assert stack.main(["check"]) == 78
    assert "MNEMO_GATEWAY_PROT" in capsys.readouterr().err
    monkeypatch.delenv("MNEMO_GATEWAY_PROT")
    assert stack.main(["check"]) == 0


def test_make_up_checks_the_settings_before_it_starts_a_service() -> None:
    makefile = (Path(__file__).resolve().parents[2] / "Makefile").read_text()
    recipe = makefile.split("\nup:", 1)[1].split("\n\n", 1)[0]
    assert recipe.index("stack.py check") < recipe.index("$(SERVICES) up")


def test_creating_the_first_tenant_on_a_gateway_that_does_not_answer_is_a_stack_error() -> None:
    """A refused or reset connection (not only an HTTP error answer) ends `make up` with
    its message, not a traceback."""
    closed = stack.free_port()
    with pytest.raises(stack.StackError, match="creating tenant"):
        stack.first_tenant(f"http://127.0.0.1:{closed}", "operator-token")
