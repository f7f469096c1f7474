"""Cross-device sync: replicas converge with the server by replaying the stream, resume with
no gap and no duplicate, start from a snapshot, and report stale writes as conflicts."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from fastapi.testclient import TestClient
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from mnemo_gateway.app import create_app
from tests.support import auth, grant, headers_for

from mnemo.bootstrap import Platform
from mnemo.client import MnemoClient, RetryPolicy
from mnemo.domain import replica
from mnemo.domain.errors import InvalidInput
from mnemo.service.app import RequestContext
from mnemo.settings import GatewaySettings
from mnemo.sync import SyncClient, SyncError, SyncGap

H = headers_for("acme", "device")
STREAM = "user:U1"


class Switch(httpx.BaseTransport):
    """A network a test can cut: requests fail as if the device went offline."""

    def __init__(self, inner: TestClient) -> None:
        self.inner = inner._transport  # the app, in process
        self.online = True
        self.budget: int | None = None  # requests left before the link drops

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.budget is not None:
            if self.budget <= 0:
                self.online = False
            self.budget -= 1
        if not self.online:
            raise httpx.ConnectError("offline", request=request)
        answer = self.inner.handle_request(request)
        return httpx.Response(answer.status_code, headers=answer.headers, content=answer.read())


@pytest.fixture
def server(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(wait_timeout=60)), headers=H) as client:
        yield client


def api(server: TestClient, headers: dict[str, str] = H, link: Switch | None = None) -> MnemoClient:
    # each request once: a test cuts the link and expects the replica to stop there
    return MnemoClient(
        str(server.base_url),
        headers=headers,
        transport=link or Switch(server),
        retry=RetryPolicy(attempts=1),
    )


def device(
    tmp_path: Path, server: TestClient, name: str, stream: str = STREAM
) -> tuple[SyncClient, Switch]:
    link = Switch(server)
    return SyncClient(tmp_path / f"{name}.sqlite3", api(server, link=link), stream, name), link


def publish(server: TestClient, events: list[dict[str, Any]]) -> None:
    r = server.post("/v1/events?wait=indexed", json={"events": events})
    assert r.status_code == 202, r.text
    assert r.json()["complete"] is True, r.text


def observe(text: str) -> dict[str, Any]:
    return {
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": STREAM,
        "payload": {"text": text},
    }


def settle(platform: Platform) -> None:
    assert platform.runner.wait_for("registrar", platform.log.head(), 60)
    assert platform.runner.wait_for("registrar", platform.log.head(), 60)


def snapshot(server: TestClient, stream: str = STREAM) -> dict[str, Any]:
    body: dict[str, Any] = server.get(f"/v1/subjects/{stream}/snapshot").json()
    return body


def test_a_replica_catches_up_and_matches_the_snapshot_and_the_read_model(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    publish(
        server,
        [observe("记住我的尺码是L"), observe("remember my size is XL"), observe("我今天想买咖啡")],
    )
    phone, _ = device(tmp_path, server, "phone")
    assert phone.pull(page_size=2) == platform.log.stream_head("acme", STREAM)
    snap = snapshot(server)
    assert phone.seq == snap["seq"]
    assert phone.checksum() == snap["checksum"]
    listed = server.get(
        f"/v1/subjects/{STREAM}/memories", params={"include_superseded": True}
    ).json()
    assert {(m["memory_id"], m["status"], m["value"]) for m in listed["memories"]} == {
        (m.memory_id, m.status.value, m.value) for m in phone.memories().values()
    }
    assert phone.current("size") is not None
    assert phone.current("size").value == "XL"  # type: ignore[union-attr]


def test_an_interrupted_pull_resumes_with_no_gap_and_no_duplicate(
    tmp_path: Path, server: TestClient
) -> None:
    publish(server, [observe(f"remember my item{i} is v{i}") for i in range(12)])
    laptop, link = device(tmp_path, server, "laptop")
    link.budget = 3  # the link drops after three pages
    applied = laptop.pull(page_size=4)
    assert applied == 12  # three pages of four landed before the drop
    assert laptop.seq == 12
    link.online, link.budget = True, None
    laptop.pull(page_size=4)
    total = snapshot(server)
    assert laptop.seq == total["seq"]
    assert laptop.checksum() == total["checksum"]


def test_a_gap_is_refused_rather_than_skipped(tmp_path: Path, server: TestClient) -> None:
    publish(server, [observe("记住我的尺码是L")])
    phone, _ = device(tmp_path, server, "phone")
    event = server.get(f"/v1/subjects/{STREAM}/events").json()["events"][0]
    with pytest.raises(SyncGap):
        phone._apply_page([event | {"seq": 2}])
    assert phone.seq == 0


def test_a_device_can_start_from_a_snapshot_and_tail(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    publish(server, [observe("记住我的尺码是L"), observe("我今天想买咖啡")])
    tablet, _ = device(tmp_path, server, "tablet")
    seq = tablet.load_snapshot()
    assert seq == platform.log.stream_head("acme", STREAM)
    publish(server, [observe("remember my size is M")])
    tablet.pull()
    full, _ = device(tmp_path, server, "full")
    full.pull()
    assert tablet.checksum() == full.checksum() == snapshot(server)["checksum"]


def test_a_verification_relayed_from_another_stream_lands_in_a_replica_that_pulled_before(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    publish(server, [observe("记住我的尺码是L")])
    phone, _ = device(tmp_path, server, "phone")
    phone.pull()
    [memory] = phone.memories().values()
    assert memory.verified_at is None
    # confirmed on another stream: the memory's own stream gets a FeedbackRelayed
    verify = {
        "type": "MemoryVerified",
        "schema_version": 1,
        "stream": "team:T1",
        "payload": {"memory_id": memory.memory_id},
    }
    publish(server, [verify])
    settle(platform)
    settle(platform)
    assert phone.pull() >= 1
    snap = snapshot(server)
    [served] = snap["memories"]
    assert served["verified_at"] is not None
    assert phone.seq == snap["seq"]
    assert phone.memories()[memory.memory_id].verified_at is not None
    assert phone.checksum() == snap["checksum"]


def test_a_stale_offline_write_is_a_conflict_with_both_versions(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    publish(server, [observe("记住我的尺码是L")])
    phone, _ = device(tmp_path, server, "phone")
    laptop, laptop_link = device(tmp_path, server, "laptop")
    phone.pull()
    laptop.pull()
    laptop_link.online = False
    laptop.write("size", "XL")  # offline, based on version 1
    assert laptop.push() == 0
    assert laptop.pending() == 1
    phone.write("size", "M")  # online, also based on version 1
    phone.push()
    settle(platform)
    laptop_link.online = True
    laptop.sync()
    settle(platform)
    laptop.pull()
    [conflict] = laptop.conflicts()
    assert conflict.key == "size"
    assert conflict.proposed["value"] == "XL"
    assert conflict.current is not None
    assert (conflict.current.value, conflict.current.version) == ("M", 2)
    # nothing was overwritten: the server still holds M, and the history shows L then M
    history = server.get(f"/v1/subjects/{STREAM}/history/size").json()["memories"]
    assert [m["value"] for m in history] == ["L", "M"]


def test_a_devices_own_offline_writes_chain_rather_than_conflict(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    phone, link = device(tmp_path, server, "phone")
    link.online = False
    phone.write("drink", "tea")
    phone.write("drink", "coffee")  # builds on the tea write still in the queue
    link.online = True
    assert phone.push() == 2
    settle(platform)
    phone.write("drink", "water")  # builds on coffee, sent but not pulled back yet
    assert phone.push() == 1
    settle(platform)
    phone.pull()
    assert phone.conflicts() == []
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("water", 3)
    history = server.get(f"/v1/subjects/{STREAM}/history/drink").json()["memories"]
    assert [m["value"] for m in history] == ["tea", "coffee", "water"]
    # after the pull, a new write builds on what the replica shows again
    phone.write("drink", "juice")
    assert phone.push() == 1
    settle(platform)
    phone.pull()
    assert phone.conflicts() == []
    assert phone.current("drink").value == "juice"  # type: ignore[union-attr]


def test_offline_writes_built_on_a_refused_one_never_replace_another_devices_change(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    phone, phone_link = device(tmp_path, server, "phone")
    laptop, _ = device(tmp_path, server, "laptop")
    phone_link.online = False
    phone.write("drink", "tea")  # expects version 0
    phone.write("drink", "coffee")  # built on tea: expects version 1
    phone.write("drink", "juice")  # built on coffee: expects version 2
    laptop.write("drink", "matcha")  # meanwhile, the laptop makes version 1
    assert laptop.push() == 1
    settle(platform)
    phone_link.online = True
    assert phone.push() == 3
    settle(platform)
    phone.pull()
    # tea was stale, and coffee and juice were built on it: all three are conflicts, and
    # the laptop's matcha stands (coffee expected version 1 and would have replaced it)
    assert sorted(c.proposed["value"] for c in phone.conflicts()) == ["coffee", "juice", "tea"]
    history = server.get(f"/v1/subjects/{STREAM}/history/drink").json()["memories"]
    assert [m["value"] for m in history] == ["matcha"]
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("matcha", 1)


def test_a_write_based_on_what_the_replica_shows_is_not_rebased_by_an_older_refusal(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    phone, phone_link = device(tmp_path, server, "phone")
    laptop, _ = device(tmp_path, server, "laptop")
    phone_link.online = False
    phone.write("drink", "tea")  # expects version 0: stale once the laptop writes
    laptop.write("drink", "matcha")
    assert laptop.push() == 1
    settle(platform)
    phone_link.online = True
    phone.pull()  # the phone now shows matcha, version 1, and still holds tea queued
    phone.write("drink", "coffee")  # based on matcha: expects version 1, chained on nothing
    assert phone.push() == 2
    settle(platform)
    phone.pull()
    assert [c.proposed["value"] for c in phone.conflicts()] == ["tea"]
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("coffee", 2)


def test_queued_duplicates_do_not_stale_the_writes_built_on_them(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    phone, link = device(tmp_path, server, "phone")
    phone.write("drink", "tea")
    phone.sync()
    link.online = False
    phone.write("drink", "tea")  # the same value again: a duplicate, it makes no version
    phone.write("drink", "coffee")  # built on it: expects version 2, which never comes
    link.online = True
    assert phone.push() == 2
    settle(platform)
    phone.pull()
    assert phone.conflicts() == []
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("coffee", 2)


def test_a_forgotten_subject_leaves_nothing_it_said_in_a_replica_that_held_it(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    """Every version the replica held (a superseded one too) keeps nothing of what the
    user said once the subject is forgotten, and the replica still matches the server."""
    phone, _ = device(tmp_path, server, "phone")
    phone.write("drink", "tea")
    phone.sync()
    phone.write("drink", "coffee")  # tea is superseded
    phone.sync()
    assert {m.value for m in phone.memories().values()} == {"tea", "coffee"}
    forget = {
        "type": "ForgetRequested",
        "schema_version": 1,
        "stream": STREAM,
        "payload": {"reason": "asked"},
    }
    answered = server.post("/v1/events?wait=registered", json={"events": [forget]})
    assert answered.status_code == 202, answered.text
    settle(platform)
    phone.pull()
    held = list(phone.memories().values())
    assert len(held) == 2
    for memory in held:
        assert memory.status.value == "forgotten"
        assert (memory.content, memory.value, memory.key, memory.tags) == ("", None, None, ())
        assert memory.provenance.source_id is None
    assert phone.checksum() == snapshot(server)["checksum"]


@contextmanager
def slow_registrar(platform: Platform, pause: float = 0.3) -> Iterator[None]:
    """The consumers lag `pause` seconds behind each append, as a busy server's would."""
    runner = platform.runner
    step = runner.run_once

    def slow() -> int:
        time.sleep(pause)
        return step()

    runner.run_once = slow  # type: ignore[method-assign]
    try:
        yield
    finally:
        del runner.run_once


def test_a_write_whose_outcome_the_wait_missed_is_sent_again_before_the_next(
    tmp_path: Path, platform: Platform
) -> None:
    """A push whose wait ends before the registrar decided keeps the write queued and stops:
    the writes after it may be built on it. The next push sends it again (a duplicate on
    the server, answered with the first outcome) and then the rest."""
    settings = GatewaySettings(wait_timeout=0.05)
    with TestClient(create_app(platform, settings), headers=H) as impatient:
        phone, _ = device(tmp_path, impatient, "phone")
        phone.write("drink", "tea")
        phone.write("drink", "coffee")
        runner, gate = platform.runner, threading.Event()
        step = runner.run_once

        def held() -> int:
            gate.wait(60)
            return step()

        runner.run_once = held  # type: ignore[method-assign]
        try:
            assert phone.push() == 1  # tea sent, its outcome not known yet
        finally:
            gate.set()
            del runner.run_once
        assert phone.pending() == 2
        settle(platform)
        assert phone.push() == 2  # tea again (a duplicate), then coffee
        settle(platform)
        assert phone.pending() == 0
        phone.pull()
    assert phone.conflicts() == []
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("coffee", 2)


def test_sync_brings_back_the_devices_own_conflict_at_once(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    # the docs' example: both devices based on the same version, the phone pushes first;
    # the laptop's sync() must pull its own rejection, with no pause of its own
    publish(server, [observe("记住我的尺码是L")])
    phone, _ = device(tmp_path, server, "phone")
    laptop, _ = device(tmp_path, server, "laptop")
    phone.pull()
    laptop.pull()
    phone.write("size", "M")
    laptop.write("size", "XL")
    with slow_registrar(platform):
        assert phone.push() == 1
        # pushed, then pulled the phone's write (declared, registered, superseded), its
        # own write and its rejection
        assert laptop.sync() == (1, 5)
    [conflict] = laptop.conflicts()
    assert conflict.proposed["value"] == "XL"
    assert conflict.current is not None
    assert (conflict.current.value, conflict.current.version) == ("M", 2)


def test_an_own_write_that_made_no_version_does_not_stale_the_next_ones(
    tmp_path: Path, server: TestClient
) -> None:
    phone, _ = device(tmp_path, server, "phone")
    phone.write("drink", "tea")
    assert phone.sync() == (1, 2)
    phone.write("drink", "tea")  # the same value again: a duplicate, no version 2
    phone.sync()
    phone.write("drink", "coffee")  # still based on version 1, which is the key's
    phone.sync()
    assert phone.conflicts() == []
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("coffee", 2)
    # a refused write of its own makes no version either
    laptop, _ = device(tmp_path, server, "laptop")
    laptop.pull()
    phone.write("drink", "juice")  # based on version 2
    laptop.write("drink", "water")  # based on version 2 too, and first: version 3
    laptop.push()
    phone.sync()
    [conflict] = phone.conflicts()
    assert conflict.proposed["value"] == "juice"
    phone.write("drink", "juice")  # kept, as the docs advise: based on version 3
    phone.sync()
    assert [c.proposed["value"] for c in phone.conflicts()] == ["juice"]
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("juice", 4)


def test_a_write_the_server_would_refuse_is_refused_before_it_is_queued(
    tmp_path: Path, server: TestClient
) -> None:
    phone, link = device(tmp_path, server, "phone")
    link.online = False
    with pytest.raises(InvalidInput) as refused:
        phone.write("drink", "x" * 5_000)
    assert (refused.value.code, refused.value.field) == ("INVALID_PAYLOAD", "payload.memory.value")
    assert phone.pending() == 0
    phone.write("drink", "tea")  # the queue is not blocked behind a write that cannot go
    link.online = True
    assert phone.push() == 1
    with pytest.raises(InvalidInput) as bad_stream:
        SyncClient(tmp_path / "bad.sqlite3", phone.client, "User:U1", "phone").write("k", "v")
    # the gateway's code for it
    assert (bad_stream.value.code, bad_stream.value.field) == ("INVALID_ENVELOPE", "stream")


def test_sync_errors_carry_the_servers_code(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    reader = grant(platform, "acme", ("memory:read",), name="reader")
    client = api(server, auth(reader))
    phone = SyncClient(tmp_path / "phone.sqlite3", client, STREAM, "phone")
    event_id = phone.write("drink", "tea")
    with pytest.raises(SyncError) as refused:
        phone.push()
    error = refused.value
    assert (error.status, error.code, error.event_id) == (403, "SCOPE_MISSING", event_id)
    assert reader not in str(error)
    assert phone.pending() == 1
    snapshot_of = SyncClient(tmp_path / "other.sqlite3", client, "team:T1", "phone")
    snapshot_of.stream = "bad stream"
    with pytest.raises(SyncError) as replay:
        snapshot_of.pull()
    assert (replay.value.status, replay.value.code) == (400, "INVALID_STREAM")
    with pytest.raises(SyncGap) as gap:
        phone._apply_page([{"seq": 2, "type": "MemoryDeclared", "payload": {}}])
    assert gap.value.code == "SYNC_GAP"


def test_a_write_the_server_will_never_take_is_discarded_and_the_next_goes(
    tmp_path: Path, server: TestClient, platform: Platform
) -> None:
    reader = grant(platform, "acme", ("memory:read",), name="reader")
    client = api(server, auth(reader))
    phone = SyncClient(tmp_path / "phone.sqlite3", client, STREAM, "phone")
    tea = phone.write("drink", "tea")  # expects version 0
    phone.write("drink", "coffee")  # built on tea: expects version 1
    with pytest.raises(SyncError) as refused:
        phone.push()
    assert refused.value.event_id == tea
    assert phone.discard(tea) is True
    assert phone.discard(tea) is False
    assert phone.pending() == 1
    phone.client = api(server)
    assert phone.sync() == (1, 2)  # coffee now expects version 0, and registers
    assert phone.conflicts() == []
    current = phone.current("drink")
    assert current is not None
    assert (current.value, current.version) == ("coffee", 1)


class Busy(Switch):
    """A server that asks the device to slow down (429) while `busy` is set."""

    busy = True

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        if self.busy and request.method == "POST":
            return httpx.Response(
                429,
                headers={"Retry-After": "1"},
                json={"error": {"code": "RATE_LIMITED", "message": "slow down"}},
            )
        return super().handle_request(request)


def test_a_busy_server_keeps_the_queue_for_later_without_an_error(
    tmp_path: Path, server: TestClient
) -> None:
    link = Busy(server)
    phone = SyncClient(tmp_path / "phone.sqlite3", api(server, link=link), STREAM, "phone")
    phone.write("drink", "tea")
    assert phone.push() == 0
    assert phone.pending() == 1
    link.busy = False
    assert phone.push() == 1
    assert phone.pending() == 0


def test_a_conflict_is_kept_when_the_replica_starts_again_from_a_snapshot(
    tmp_path: Path, server: TestClient
) -> None:
    phone, _ = device(tmp_path, server, "phone")
    laptop, _ = device(tmp_path, server, "laptop")
    phone.write("drink", "tea")
    phone.sync()
    laptop.load_snapshot()
    phone.write("drink", "coffee")
    phone.push()
    laptop.write("drink", "water")  # based on tea, version 1: refused
    assert laptop.push() == 1
    # the snapshot folds the laptop's rejection in: no pull ever sees it
    laptop.load_snapshot()
    [conflict] = laptop.conflicts()
    assert conflict.proposed["value"] == "water"
    assert conflict.detail == "the key is at version 2, not 1"
    assert conflict.current is not None
    assert (conflict.current.value, conflict.current.version) == ("coffee", 2)
    assert laptop.pull() == 0
    assert len(laptop.conflicts()) == 1


def test_the_live_tail_streams_events_and_resumes_from_last_event_id(server: TestClient) -> None:
    publish(server, [observe("记住我的尺码是L"), observe("hello")])
    with server.stream(
        "GET", f"/v1/subjects/{STREAM}/events/live", params={"max_seconds": 0.5}
    ) as r:
        assert r.headers["content-type"].startswith("text/event-stream")
        ids = [int(line[4:]) for line in r.iter_lines() if line.startswith("id: ")]
    assert ids == list(range(1, len(ids) + 1))
    last = ids[1]
    with server.stream(
        "GET",
        f"/v1/subjects/{STREAM}/events/live",
        params={"max_seconds": 0.5},
        headers={"Last-Event-ID": str(last)},
    ) as r:
        resumed = [int(line[4:]) for line in r.iter_lines() if line.startswith("id: ")]
    assert resumed == ids[2:]
    # anything but a sequence number is refused, not read as "from the start"
    for bad in ("abc", "-5", "9" * 40, "1.5"):
        refused = server.get(
            f"/v1/subjects/{STREAM}/events/live",
            params={"max_seconds": 0.5},
            headers={"Last-Event-ID": bad},
        )
        assert refused.status_code == 400, bad
        assert refused.json()["error"]["code"] == "INVALID_LAST_EVENT_ID"


def test_a_live_tail_ends_soon_after_its_key_is_revoked(
    platform: Platform, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mnemo_gateway.routes import sync as sync_routes

    monkeypatch.setattr(sync_routes, "KEY_RECHECK_SECONDS", 0.2)
    key = grant(platform, "acme", ("memory:read",), name="phone")
    key_id = key.split("_")[1]
    with TestClient(create_app(platform), headers=auth(key)) as client:
        started = time.monotonic()
        with client.stream(
            "GET", f"/v1/subjects/{STREAM}/events/live", params={"max_seconds": 30}
        ) as r:
            assert r.status_code == 200
            platform.access.revoke("acme", key_id)
            lines = list(r.iter_lines())
        assert time.monotonic() - started < 10
    assert "event: error" in lines
    assert any('"KEY_REVOKED"' in line for line in lines)


OPS = st.lists(
    st.tuples(
        st.sampled_from(["write", "sync", "offline", "online"]),
        st.integers(0, 2),  # which device
        st.sampled_from(["size", "colour", "budget"]),
        st.sampled_from(["S", "M", "L", "XL", "red", "teal", "500"]),
    ),
    min_size=5,
    max_size=25,
)


@settings(
    max_examples=12,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(ops=OPS)
def test_devices_with_random_interleaved_writes_converge(
    tmp_path_factory: pytest.TempPathFactory,
    server: TestClient,
    platform: Platform,
    ops: list[tuple[str, int, str, str]],
) -> None:
    base = tmp_path_factory.mktemp("devices")
    stream = f"user:P{platform.log.head()}"  # a fresh stream per example
    devices = [device(base, server, f"d{i}", stream) for i in range(3)]
    written: list[tuple[int, str]] = []
    for op, who, key, value in ops:
        client, link = devices[who]
        if op == "write":
            written.append((who, client.write(key, value)))
        elif op == "sync":
            client.sync()
        elif op == "offline":
            link.online = False
        else:
            link.online = True
    for client, link in devices:
        link.online = True
        client.push()
    settle(platform)
    for client, _ in devices:
        client.pull()
    snap = snapshot(server, stream)
    assert {c.checksum() for c, _ in devices} == {snap["checksum"]}
    seq, state = platform.app.snapshot(RequestContext("acme", "t"), stream)
    assert (seq, replica.checksum(state)) == (snap["seq"], snap["checksum"])
    # every write was decided (registered, duplicate or conflict): none vanished
    for who, event_id in written:
        [outcome] = platform.store.outcome("acme", event_id)
        if outcome.reason_code == "VERSION_CONFLICT":
            assert event_id in {c.event_id for c in devices[who][0].conflicts()}
        else:
            assert outcome.kind.value in ("registered", "superseded", "duplicate")
    for client, _ in devices:
        client.close()
