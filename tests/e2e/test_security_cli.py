"""`mnemo audit verify`: OK on an intact chain, the first broken link (exit 4) after a
stored audit row is tampered with; offline on a data directory and through the server.
`mnemo keys rotate`: new values are sealed under the new version, old ones still open."""

from __future__ import annotations

import sqlite3
from datetime import UTC, datetime
from pathlib import Path

import pytest
from click.testing import CliRunner
from tests.support import fixed_key, running_server

from mnemo.bootstrap import build_embedded, make_key_vault
from mnemo.domain.ids import new_event_id
from mnemo.entrypoints.cli import cli
from mnemo.service.app import RequestContext, Wait
from mnemo.settings import MnemoSettings

KEY = fixed_key("acme")


def fill(data: Path, count: int = 4) -> None:
    platform = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL")
    )
    try:
        platform.runner.start()
        events = [
            {
                "event_id": new_event_id(datetime.now(UTC)),
                "type": "ObservationRecorded",
                "schema_version": 2,
                "stream": "user:U1",
                "payload": {"text": f"remember my size is {size}"},
            }
            for size in ("S", "M", "L", "XL")[:count]
        ]
        ctx = RequestContext("acme", "t")
        done = platform.app.publish(ctx, events, wait=Wait.INDEXED, timeout=60)
        assert done.complete
        assert platform.runner.wait_for("audit", platform.log.head(), 60)
    finally:
        platform.close()


def tamper(data: Path, n: int) -> str:
    """Overwrite link n of the first of acme's streams that has one; that stream's name."""
    with sqlite3.connect(data / "store.sqlite3") as db:
        [stream] = db.execute(
            "SELECT MIN(stream) FROM audit_links WHERE tenant = 'acme' AND n = ?", (n,)
        ).fetchone()
        changed = db.execute(
            "UPDATE audit_links SET hash = ? WHERE tenant = 'acme' AND stream = ? AND n = ?",
            ("0" * 64, stream, n),
        ).rowcount
    assert changed == 1
    return str(stream)


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("MNEMO_EMBEDDER", "hashing")
    return CliRunner()


def test_offline_verify_then_tamper(tmp_path: Path, runner: CliRunner) -> None:
    data = tmp_path / "data"
    fill(data)
    ok = runner.invoke(cli, ["--tenant", "acme", "audit", "verify", "--data-dir", str(data)])
    assert ok.exit_code == 0, ok.output
    assert ok.output.startswith("OK: ")
    assert "stream chains intact for tenant acme" in ok.output

    stream = tamper(data, 3)
    broken = runner.invoke(cli, ["--tenant", "acme", "audit", "verify", "--data-dir", str(data)])
    assert broken.exit_code == 4, broken.output
    assert "BROKEN: first broken link 3" in broken.output
    assert f"{stream} link 3" in broken.output

    as_json = runner.invoke(
        cli, ["--tenant", "acme", "--json", "audit", "verify", "--data-dir", str(data)]
    )
    assert as_json.exit_code == 4
    assert '"first_broken": 3' in as_json.output


def test_a_log_record_that_is_no_event_any_more_breaks_the_trail(
    tmp_path: Path, runner: CliRunner
) -> None:
    """A record of the log overwritten with text that is not an event made the offline
    check end in a traceback (exit 1): it is a broken trail, exit 4, named where."""
    data = tmp_path / "data"
    fill(data)
    with sqlite3.connect(data / "log.sqlite3") as db:
        stream, seq = db.execute(
            "SELECT stream, seq FROM events WHERE tenant = 'acme' ORDER BY offset LIMIT 1 OFFSET 2"
        ).fetchone()
        db.execute(
            "UPDATE events SET body = ? WHERE tenant = 'acme' AND stream = ? AND seq = ?",
            (b"not an event", stream, seq),
        )
    for extra in ([], ["--json"]):
        broken = runner.invoke(
            cli, ["--tenant", "acme", *extra, "audit", "verify", "--data-dir", str(data)]
        )
        assert broken.exit_code == 4, broken.output
        assert "AUDIT_LOG_UNREADABLE" in broken.output
        assert "Traceback" not in broken.output


def test_online_verify(tmp_path: Path, runner: CliRunner) -> None:
    data = tmp_path / "data"
    fill(data, 2)
    with running_server(data) as (url, platform):
        assert platform.runner.wait_for("audit", platform.log.head(), 60)
        ok = runner.invoke(
            cli, ["--url", url, "--api-key", KEY, "--tenant", "acme", "audit", "verify"]
        )
        assert ok.exit_code == 0, ok.output
        assert ok.output.startswith("OK: ")
        # the key alone says whose trail it is: no tenant given is no "tenant None"
        keyed = runner.invoke(cli, ["--url", url, "--api-key", KEY, "audit", "verify"])
        assert keyed.exit_code == 0, keyed.output
        assert "intact for the key's tenant" in keyed.output
        assert "None" not in keyed.output
    tamper(data, 1)
    with running_server(data) as (url, _):
        broken = runner.invoke(
            cli, ["--url", url, "--api-key", KEY, "--tenant", "acme", "audit", "verify"]
        )
        assert broken.exit_code == 4, broken.output
        assert "first broken link 1" in broken.output


def test_keys_rotate_makes_no_key_and_no_data_directory(
    tmp_path: Path, runner: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Offline rotation made ./var/data/keys/vault.json wherever it ran, and a key for a
    tenant nobody had: it now needs a data directory and a key that is there."""
    data = tmp_path / "data"
    fill(data, 1)
    monkeypatch.chdir(tmp_path)
    nowhere = runner.invoke(cli, ["--tenant", "acme", "keys", "rotate"])
    assert nowhere.exit_code == 1, nowhere.output
    assert "no Mnemo data in" in nowhere.stderr
    assert not (tmp_path / "var").exists()
    missing = runner.invoke(
        cli, ["--tenant", "acme", "keys", "rotate", "--data-dir", str(tmp_path / "none")]
    )
    assert missing.exit_code == 1
    assert not (tmp_path / "none").exists()
    base = ["keys", "rotate", "--data-dir", str(data)]
    unknown = runner.invoke(cli, ["--tenant", "nosuchtenant", *base])
    assert unknown.exit_code == 2, unknown.output
    assert "KEY_NOT_FOUND" in unknown.stderr
    userless = runner.invoke(cli, ["--tenant", "acme", *base, "--stream", "user:"])
    assert userless.exit_code == 2
    assert "INVALID_STREAM" in userless.stderr
    vault = make_key_vault(MnemoSettings(data_dir=data))
    vault.data_key("acme/user:GONE")
    vault.destroy("acme/user:GONE")
    gone = runner.invoke(cli, ["--tenant", "acme", *base, "--stream", "user:GONE"])
    assert gone.exit_code == 2, gone.output
    assert "KEY_DESTROYED" in gone.stderr
    assert not vault.has_key("nosuchtenant")


def test_keys_rotate_then_new_values_use_the_new_version(tmp_path: Path, runner: CliRunner) -> None:
    data = tmp_path / "data"
    fill(data, 1)
    tenant = runner.invoke(cli, ["--tenant", "acme", "keys", "rotate", "--data-dir", str(data)])
    assert tenant.exit_code == 0, tenant.output
    assert tenant.output.startswith("key acme is now at version ")
    user = runner.invoke(
        cli,
        ["--tenant", "acme", "keys", "rotate", "--stream", "user:U1", "--data-dir", str(data)],
    )
    assert user.exit_code == 0, user.output
    assert user.output.startswith("key acme/user:U1 is now at version ")
    user_version = int(user.output.split()[-1])
    platform = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL")
    )
    try:
        ctx = RequestContext("acme", "t")
        sensitive = {
            "type": "ObservationRecorded",
            "schema_version": 2,
            "stream": "user:U1",
            "payload": {"text": "my mail is a.b@example.com"},
        }
        before = platform.app.publish(ctx, [sensitive]).accepted[0]
        first = platform.log.get("acme", before.event_id)
        assert first is not None
        assert first.envelope.encryption is not None
        version = first.envelope.encryption.key_version
        assert version == user_version  # sealed under the version the rotation started
    finally:
        platform.close()
    again = runner.invoke(
        cli,
        ["--tenant", "acme", "keys", "rotate", "--stream", "user:U1", "--data-dir", str(data)],
    )
    assert again.output.strip() == f"key acme/user:U1 is now at version {version + 1}"
    platform = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL")
    )
    try:
        after = platform.app.publish(ctx, [sensitive]).accepted[0]
        second = platform.log.get("acme", after.event_id)
        assert second is not None
        assert second.envelope.encryption is not None
        assert second.envelope.encryption.key_version == version + 1
        opened = platform.app.replay(ctx, "user:U1", 1, 100)
        texts = [e.envelope.payload.get("text") for e in opened]
        assert texts.count("my mail is a.b@example.com") == 2  # both versions open
    finally:
        platform.close()
    not_own = runner.invoke(
        cli,
        ["--tenant", "acme", "keys", "rotate", "--stream", "session:S1", "--data-dir", str(data)],
    )
    assert not_own.exit_code == 1
    assert "no key of its own" in not_own.output
