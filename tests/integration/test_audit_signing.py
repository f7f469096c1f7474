"""Signed audit checkpoints in the embedded mode (SQLite, the development signing key):
the attacks a hash chain alone lets through are reported by `mnemo audit verify`, with a
code and exit 4 (issue 16, finding 7).

Each attack is made the way someone who can write the data directory (but cannot sign)
would make it: an event edited in the log with every link after it recomputed, an edited
log rebuilt with `mnemo admin rebuild`, the last event of a stream deleted with its link, a
checkpoint altered to match, and checkpoints re-signed with a key of the attacker's own.
With OpenBao as the vault, a stream rolled back to an older checkpoint (the newer
checkpoints and the events after it removed) is reported against the anchor kept in the
vault's KV engine, which the data directory's writers cannot move back."""

from __future__ import annotations

import itertools
import json
import logging
import sqlite3
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from click.testing import CliRunner
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.local_signer import LocalFileSigner
from mnemo.adapters.sqlite_checkpoints import SqliteAuditCheckpoints
from mnemo.adapters.vault_anchors import VaultKvAnchors
from mnemo.bootstrap import build_embedded
from mnemo.domain.checkpoint import FIRST, Checkpoint, checkpoint_digest
from mnemo.domain.events import Envelope
from mnemo.domain.ids import new_event_id
from mnemo.domain.projection import PutAudit
from mnemo.entrypoints.cli import cli
from mnemo.handlers import audit
from mnemo.service.app import RequestContext
from mnemo.service.insights import Insights
from mnemo.settings import MnemoSettings

T0 = datetime(2026, 12, 2, 9, 0, tzinfo=UTC)
CTX = RequestContext("acme", "tester")


def settings(data: Path, **extra: Any) -> MnemoSettings:
    values: dict[str, Any] = {
        "data_dir": data,
        "embedder": "hashing",
        "sqlite_synchronous": "NORMAL",
        "audit_checkpoint_every": 4,
        "audit_checkpoint_seconds": 600,
    }
    values.update(extra)
    return MnemoSettings(**values)


def observation(text: str, stream: str) -> dict[str, Any]:
    return {
        "event_id": new_event_id(datetime.now(UTC)),
        "type": "ObservationRecorded",
        "schema_version": 2,
        "stream": stream,
        "payload": {"text": text},
    }


def fill(data: Path, *, sign_tail: bool = True, **extra: Any) -> None:
    """Six events in user:U1 and two in user:U2, linked; with `sign_tail`, the time limit
    passes and the idle consumer signs each stream's head."""
    clock = FixedClock(T0)
    platform = build_embedded(settings(data, **extra), clock=clock)
    try:
        platform.app.publish(
            CTX,
            [observation(f"note {i}", "user:U1") for i in range(6)]
            + [observation(f"other {i}", "user:U2") for i in range(2)],
        )
        platform.runner.drain()
        if sign_tail:
            clock.advance(timedelta(seconds=601))
            platform.runner.drain()
    finally:
        platform.close()


def verify(runner: CliRunner, data: Path) -> tuple[int, dict[str, Any]]:
    done = runner.invoke(
        cli, ["--tenant", "acme", "--json", "audit", "verify", "--data-dir", str(data)]
    )
    return done.exit_code, json.loads(done.stdout)


def events_of(data: Path, stream: str) -> list[Envelope]:
    with sqlite3.connect(data / "log.sqlite3") as db:
        rows = db.execute(
            "SELECT body FROM events WHERE tenant = 'acme' AND stream = ? ORDER BY seq", (stream,)
        ).fetchall()
    return [Envelope.model_validate_json(r[0]) for r in rows]


def edit_event(data: Path, stream: str, seq: int) -> None:
    """Change the text of one logged event in place."""
    with sqlite3.connect(data / "log.sqlite3") as db:
        [(body,)] = db.execute(
            "SELECT body FROM events WHERE tenant = 'acme' AND stream = ? AND seq = ?",
            (stream, seq),
        ).fetchall()
        event = json.loads(body)
        # the user's words are sealed (a stand-in is replaced on opening): move its time
        stamp = datetime.fromisoformat(event["occurred_at"]) + timedelta(hours=1)
        event["occurred_at"] = stamp.isoformat()
        db.execute(
            "UPDATE events SET body = ? WHERE tenant = 'acme' AND stream = ? AND seq = ?",
            (json.dumps(event).encode(), stream, seq),
        )


def recompute_links(data: Path, stream: str) -> None:
    """Relink the stream from the log as it is now, the way the audit consumer would."""
    with sqlite3.connect(data / "store.sqlite3") as db:
        offsets = dict(
            db.execute(
                "SELECT n, offset FROM audit_links WHERE tenant = 'acme' AND stream = ?",
                (stream,),
            ).fetchall()
        )
        db.execute("DELETE FROM audit_links WHERE tenant = 'acme' AND stream = ?", (stream,))
        last = None
        for event in events_of(data, stream):
            [write] = audit.handle(event, offsets[event.seq], last).writes
            assert isinstance(write, PutAudit)
            r = write.record
            db.execute(
                "INSERT INTO audit_links VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                (r.tenant, r.stream, r.n, r.event_id, r.event_type, r.offset, r.prev_hash, r.hash),
            )
            last = r


def checkpoints(data: Path) -> list[Checkpoint]:
    store = SqliteAuditCheckpoints(data / "audit-checkpoints.sqlite3")
    try:
        return store.of_tenant("acme")
    finally:
        store.close()


@pytest.fixture
def runner(monkeypatch: pytest.MonkeyPatch) -> CliRunner:
    monkeypatch.setenv("MNEMO_EMBEDDER", "hashing")
    return CliRunner()


@pytest.fixture
def data(tmp_path: Path) -> Path:
    fill(tmp_path / "data")
    return tmp_path / "data"


def test_the_consumer_signs_every_n_links_and_the_idle_heads(tmp_path: Path) -> None:
    data = tmp_path / "data"
    fill(data, sign_tail=False, audit_checkpoint_each_batch=False)
    # every 4 links: user:U1's link 4 and 8 (its 6 observations and their registrations)
    by_count = {(c.stream, c.n) for c in checkpoints(data)}
    u1 = len(events_of(data, "user:U1"))
    assert by_count == {("user:U1", n) for n in range(4, u1 + 1, 4)}
    # more events, then the time limit passes: every head is signed
    fill(data, audit_checkpoint_each_batch=False)
    heads = {c.stream: c.n for c in checkpoints(data)}
    assert heads == {s: len(events_of(data, s)) for s in ("user:U1", "user:U2")}
    chained = [c for c in checkpoints(data) if c.stream == "user:U1"]
    assert [c.index for c in chained] == list(range(1, len(chained) + 1))
    assert chained[0].prev == FIRST
    assert all(b.prev == checkpoint_digest(a) for a, b in itertools.pairwise(chained))


def test_an_intact_trail_verifies_with_links_past_the_last_checkpoint_unsigned(
    tmp_path: Path, runner: CliRunner
) -> None:
    data = tmp_path / "data"
    fill(data, sign_tail=False, audit_checkpoint_each_batch=False)
    code, answer = verify(runner, data)
    assert code == 0, answer
    assert answer["status"] == "intact"
    assert answer["checkpoints"] == len(checkpoints(data)) > 0
    assert answer["unsigned"] > 0
    assert answer["signed"] + answer["unsigned"] == answer["links"]
    fill(data)
    code, answer = verify(runner, data)
    assert (code, answer["status"], answer["unsigned"]) == (0, "intact", 0)
    text = runner.invoke(cli, ["--tenant", "acme", "audit", "verify", "--data-dir", str(data)])
    assert "signed checkpoints, 0 not yet signed" in text.output


def test_an_edit_with_every_link_recomputed_is_reported(data: Path, runner: CliRunner) -> None:
    edit_event(data, "user:U1", 2)
    recompute_links(data, "user:U1")
    code, answer = verify(runner, data)
    assert code == 4, answer
    assert answer["status"] == "broken"
    assert answer["code"] == "AUDIT_CHECKPOINT_MISMATCH"
    assert answer["stream"] == "user:U1"
    assert answer["first_broken"] == 4  # the first signed link at or after the edit


def test_an_edit_then_a_rebuild_is_reported(
    data: Path, runner: CliRunner, caplog: pytest.LogCaptureFixture
) -> None:
    signed_before = checkpoints(data)
    edit_event(data, "user:U1", 5)
    with caplog.at_level(logging.ERROR, logger="mnemo.audit"):
        rebuilt = runner.invoke(cli, ["admin", "rebuild", "--data-dir", str(data)])
    assert rebuilt.exit_code == 0, rebuilt.output
    # the rebuild recomputed the chain from the edited log: it verifies on its own...
    with sqlite3.connect(data / "store.sqlite3") as db:
        n = db.execute("SELECT COUNT(*) FROM audit_links WHERE stream = 'user:U1'").fetchone()
    assert n[0] == len(events_of(data, "user:U1"))
    # ...and it neither rewrote the checkpoints nor signed the edited chain
    assert checkpoints(data) == signed_before
    assert "AUDIT_CHECKPOINT_MISMATCH" in caplog.text
    code, answer = verify(runner, data)
    assert code == 4, answer
    first_signed_after = min(c.n for c in signed_before if c.stream == "user:U1" and c.n >= 5)
    assert (answer["code"], answer["stream"], answer["first_broken"]) == (
        "AUDIT_CHECKPOINT_MISMATCH",
        "user:U1",
        first_signed_after,
    )


def test_a_deleted_tail_event_with_its_link_is_reported(data: Path, runner: CliRunner) -> None:
    last = len(events_of(data, "user:U2"))
    with sqlite3.connect(data / "log.sqlite3") as db:
        db.execute(
            "DELETE FROM events WHERE tenant = 'acme' AND stream = 'user:U2' AND seq = ?", (last,)
        )
        db.execute(
            "UPDATE streams SET head = head - 1 WHERE tenant = 'acme' AND stream = 'user:U2'"
        )
    with sqlite3.connect(data / "store.sqlite3") as db:
        db.execute(
            "DELETE FROM audit_links WHERE tenant = 'acme' AND stream = 'user:U2' AND n = ?",
            (last,),
        )
    code, answer = verify(runner, data)
    assert code == 4, answer
    assert (answer["code"], answer["stream"], answer["first_broken"]) == (
        "AUDIT_TAIL_MISSING",
        "user:U2",
        last,
    )


def test_a_checkpoint_altered_to_match_an_edit_is_reported(data: Path, runner: CliRunner) -> None:
    """The signature then covers other data than the row says."""
    edit_event(data, "user:U2", 1)
    recompute_links(data, "user:U2")
    with sqlite3.connect(data / "store.sqlite3") as db:
        [(new_head,)] = db.execute(
            "SELECT hash FROM audit_links WHERE stream = 'user:U2' ORDER BY n DESC LIMIT 1"
        ).fetchall()
    with sqlite3.connect(data / "audit-checkpoints.sqlite3") as db:
        db.execute("UPDATE audit_checkpoints SET hash = ? WHERE stream = 'user:U2'", (new_head,))
    code, answer = verify(runner, data)
    assert code == 4, answer
    assert (answer["code"], answer["stream"]) == ("AUDIT_SIGNATURE_INVALID", "user:U2")


def test_checkpoints_signed_with_another_key_are_reported(
    data: Path, tmp_path: Path, runner: CliRunner
) -> None:
    """An attacker recomputes the chain after an edit and signs fresh checkpoints of it,
    correctly chained, with a key of their own."""
    edit_event(data, "user:U1", 1)
    recompute_links(data, "user:U1")
    theirs = LocalFileSigner(tmp_path / "attacker" / "key.json")
    with sqlite3.connect(data / "store.sqlite3") as db:
        hashes = dict(db.execute("SELECT n, hash FROM audit_links WHERE stream = 'user:U1'"))
    prev, forged = FIRST, []
    for old in [c for c in checkpoints(data) if c.stream == "user:U1"]:
        fields = (old.tenant, old.stream, old.index, old.n, hashes[old.n], prev, old.signed_at)
        unsigned = Checkpoint(*fields, signature=theirs.sign("acme", b""))
        cp = Checkpoint(*fields, signature=theirs.sign("acme", unsigned.message()))
        assert theirs.verify("acme", cp.message(), cp.signature)
        forged.append(cp)
        prev = checkpoint_digest(cp)
    with sqlite3.connect(data / "audit-checkpoints.sqlite3") as db:
        for cp in forged:
            db.execute(
                "UPDATE audit_checkpoints SET hash = ?, prev = ?, signature = ? "
                "WHERE stream = ? AND idx = ?",
                (cp.hash, cp.prev, cp.signature.value, cp.stream, cp.index),
            )
    code, answer = verify(runner, data)
    assert code == 4, answer
    assert (answer["code"], answer["stream"]) == ("AUDIT_SIGNATURE_INVALID", "user:U1")


def test_a_removed_checkpoint_is_reported(data: Path, runner: CliRunner) -> None:
    with sqlite3.connect(data / "audit-checkpoints.sqlite3") as db:
        assert (
            db.execute(
                "DELETE FROM audit_checkpoints WHERE stream = 'user:U1' AND idx = 1"
            ).rowcount
            == 1
        )
    code, answer = verify(runner, data)
    assert code == 4, answer
    assert (answer["code"], answer["stream"]) == ("AUDIT_CHECKPOINT_MISSING", "user:U1")


# ---- a stream rolled back to an older checkpoint, against the vault's anchor --------------


@pytest.fixture
def vault(monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """OpenBao as the vault, for the filling platform and for `mnemo audit verify`, under
    names of this test's own."""
    url, token = vault_settings()
    if token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    values: dict[str, Any] = {
        "vault_addr": url,
        "vault_token": token,
        "vault_key_prefix": f"emb{uuid.uuid4().hex[:10]}",
        "audit_signing_key": f"audit-{uuid.uuid4().hex[:12]}",
    }
    for name, value in values.items():
        monkeypatch.setenv(f"MNEMO_{name.upper()}", value)
    return values


def roll_back(data: Path, stream: str, to_index: int) -> Checkpoint:
    """What someone who can write the data directory (not the vault) does to take a
    stream back to its checkpoint `to_index`: the events after it and their links
    removed, the newer checkpoints too. The checkpoint kept is returned."""
    kept = [c for c in checkpoints(data) if c.stream == stream][to_index - 1]
    with sqlite3.connect(data / "log.sqlite3") as db:
        db.execute(
            "DELETE FROM events WHERE tenant = 'acme' AND stream = ? AND seq > ?",
            (stream, kept.n),
        )
        db.execute(
            "UPDATE streams SET head = ? WHERE tenant = 'acme' AND stream = ?", (kept.n, stream)
        )
    with sqlite3.connect(data / "store.sqlite3") as db:
        db.execute(
            "DELETE FROM audit_links WHERE tenant = 'acme' AND stream = ? AND n > ?",
            (stream, kept.n),
        )
    with sqlite3.connect(data / "audit-checkpoints.sqlite3") as db:
        db.execute("DELETE FROM audit_checkpoints WHERE stream = ? AND idx > ?", (stream, to_index))
    return kept


def unanchored_status(data: Path, vault: dict[str, Any]) -> str:
    """The verification as it was before anchors: everything but the vault's anchor."""
    platform = build_embedded(settings(data, **vault))
    try:
        return (
            Insights(
                platform.log,
                platform.store,
                platform.app.clock,
                checkpoints=platform.checkpoints,
                signer=platform.signer,
            )
            .audit(CTX)
            .status
        )
    finally:
        platform.close()


def test_a_stream_rolled_back_to_an_older_checkpoint_is_reported(
    tmp_path: Path, runner: CliRunner, vault: dict[str, Any]
) -> None:
    data = tmp_path / "data"
    fill(data, **vault)
    code, answer = verify(runner, data)
    assert (code, answer["status"], answer["anchored"]) == (0, "intact", 2)
    anchors = VaultKvAnchors(
        vault["vault_addr"], vault["vault_token"], prefix=vault["vault_key_prefix"]
    )
    [anchor] = [a for a in anchors.of_tenant("acme") if a.stream == "user:U1"]
    assert anchor == [c for c in checkpoints(data) if c.stream == "user:U1"][-1]
    kept = roll_back(data, "user:U1", 1)
    assert kept.index < anchor.index
    assert unanchored_status(data, vault) == "intact"  # the store alone cannot tell
    code, answer = verify(runner, data)
    assert code == 4, answer
    assert (answer["status"], answer["code"], answer["stream"], answer["first_broken"]) == (
        "broken",
        "AUDIT_CHECKPOINT_ROLLBACK",
        "user:U1",
        anchor.n,
    )
    text = runner.invoke(cli, ["--tenant", "acme", "audit", "verify", "--data-dir", str(data)])
    assert text.exit_code == 4
    assert "AUDIT_CHECKPOINT_ROLLBACK" in text.output
    # the consumer signing the rolled-back stream again does not take its anchor back
    fill(data, **vault)
    assert [a for a in anchors.of_tenant("acme") if a.stream == "user:U1"] == [anchor]
    code, answer = verify(runner, data)
    assert (code, answer["code"]) == (4, "AUDIT_CHECKPOINT_ROLLBACK")


def test_with_the_vault_out_of_reach_the_trail_is_unverified(
    tmp_path: Path, runner: CliRunner, vault: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    data = tmp_path / "data"
    fill(data, **vault)
    monkeypatch.setenv("MNEMO_VAULT_ADDR", "http://127.0.0.1:9")
    monkeypatch.setenv("MNEMO_VAULT_TIMEOUT", "0.5")
    code, answer = verify(runner, data)
    assert code == 4, answer
    assert (answer["status"], answer["code"]) == ("unverified", "AUDIT_SIGNER_UNAVAILABLE")


# ---- every batch signed: the attacks on OpenBao, with the default limits ------------------


@pytest.fixture
def batch_signed(tmp_path: Path, vault: dict[str, Any]) -> Path:
    """Events published and consumed once, with the default limits (a head is signed every
    1,000 links or after 60 s, neither reached here): only the end of the audit consumer's
    batches signs the heads, with OpenBao's transit key, anchored in its KV engine. (The
    clock stands still: every batch is signed, not only one a second.)"""
    data = tmp_path / "data"
    fill(
        data,
        sign_tail=False,
        audit_checkpoint_every=1_000,
        audit_checkpoint_seconds=60,
        audit_checkpoint_batch_seconds=0,  # the test's clock stands still
    )
    assert not (data / "keys" / "audit-signing.json").exists()  # OpenBao signed
    return data


def delete_tail(data: Path, stream: str) -> int:
    """The stream's last event removed from the log, with its link; its number."""
    last = len(events_of(data, stream))
    with sqlite3.connect(data / "log.sqlite3") as db:
        db.execute(
            "DELETE FROM events WHERE tenant = 'acme' AND stream = ? AND seq = ?", (stream, last)
        )
        db.execute(
            "UPDATE streams SET head = head - 1 WHERE tenant = 'acme' AND stream = ?", (stream,)
        )
    with sqlite3.connect(data / "store.sqlite3") as db:
        db.execute(
            "DELETE FROM audit_links WHERE tenant = 'acme' AND stream = ? AND n = ?", (stream, last)
        )
    return last


def test_each_committed_batch_leaves_its_heads_signed(
    batch_signed: Path, runner: CliRunner
) -> None:
    heads = {c.stream: c.n for c in checkpoints(batch_signed)}
    assert heads == {s: len(events_of(batch_signed, s)) for s in ("user:U1", "user:U2")}
    code, answer = verify(runner, batch_signed)
    assert (code, answer["status"], answer["unsigned"], answer["anchored"]) == (0, "intact", 0, 2)


def test_a_tail_deleted_after_the_last_batch_is_reported(
    batch_signed: Path, runner: CliRunner
) -> None:
    """No time limit passed and no count was reached: before each batch was signed, the
    links after the newest checkpoint were covered by the chain alone, and this verified."""
    last = delete_tail(batch_signed, "user:U2")
    code, answer = verify(runner, batch_signed)
    assert code == 4, answer
    assert (answer["code"], answer["stream"], answer["first_broken"]) == (
        "AUDIT_TAIL_MISSING",
        "user:U2",
        last,
    )


def test_a_tail_deleted_with_its_checkpoint_is_reported_against_the_anchor(
    batch_signed: Path, runner: CliRunner
) -> None:
    """The batch's checkpoint removed too: the anchor in OpenBao's KV still names it."""
    last = delete_tail(batch_signed, "user:U2")
    with sqlite3.connect(batch_signed / "audit-checkpoints.sqlite3") as db:
        removed = db.execute(
            "DELETE FROM audit_checkpoints WHERE stream = 'user:U2' AND n = ?", (last,)
        ).rowcount
    assert removed == 1
    code, answer = verify(runner, batch_signed)
    assert code == 4, answer
    assert (answer["code"], answer["stream"]) == ("AUDIT_CHECKPOINT_ROLLBACK", "user:U2")


def test_an_edit_of_a_batch_signed_log_is_reported(batch_signed: Path, runner: CliRunner) -> None:
    edit_event(batch_signed, "user:U1", 3)
    code, answer = verify(runner, batch_signed)
    assert code == 4, answer
    assert (answer["code"], answer["stream"], answer["first_broken"]) == (
        "AUDIT_CHAIN_BROKEN",
        "user:U1",
        3,
    )


def test_a_recomputed_chain_of_a_batch_signed_log_is_reported(
    batch_signed: Path, runner: CliRunner
) -> None:
    edit_event(batch_signed, "user:U1", 3)
    recompute_links(batch_signed, "user:U1")
    code, answer = verify(runner, batch_signed)
    assert code == 4, answer
    head = len(events_of(batch_signed, "user:U1"))  # the batch's checkpoint is the only one
    assert (answer["code"], answer["stream"], answer["first_broken"]) == (
        "AUDIT_CHECKPOINT_MISMATCH",
        "user:U1",
        head,
    )


def test_a_rebuild_over_an_edited_batch_signed_log_is_reported(
    batch_signed: Path, runner: CliRunner
) -> None:
    edit_event(batch_signed, "user:U1", 3)
    rebuilt = runner.invoke(cli, ["admin", "rebuild", "--data-dir", str(batch_signed)])
    assert rebuilt.exit_code == 0, rebuilt.output
    code, answer = verify(runner, batch_signed)
    assert code == 4, answer
    head = len(events_of(batch_signed, "user:U1"))
    assert (answer["code"], answer["stream"], answer["first_broken"]) == (
        "AUDIT_CHECKPOINT_MISMATCH",
        "user:U1",
        head,
    )
