"""Contract of the CheckpointAnchors port: each stream's anchor is the newest checkpoint
given to it, read back exactly; it only moves forward (an older or equal index leaves it,
also when writers race); tenants are kept apart. Run against the development file and
OpenBao's KV v2 engine, where check-and-set is the vault's own: a write that does not name
the version it replaces is refused."""

from __future__ import annotations

import threading
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.adapters.sqlite_anchors import SqliteCheckpointAnchors
from mnemo.domain.checkpoint import FIRST, Checkpoint, Signature, checkpoint_digest
from mnemo.domain.errors import ConflictError, Unavailable
from mnemo.ports import CheckpointAnchors

T0 = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)


def cp(index: int, tenant: str = "acme", stream: str = "user:U1", **kw: Any) -> Checkpoint:
    """Checkpoint `index` of a stream's chain: each names the digest of the one before."""
    values: dict[str, Any] = {
        "tenant": tenant,
        "stream": stream,
        "index": index,
        "n": index * 10,
        "hash": f"{index:064x}",
        "prev": FIRST if index == 1 else checkpoint_digest(cp(index - 1, tenant, stream)),
        "signed_at": T0 + timedelta(seconds=index, microseconds=index),
        "signature": Signature(1, f"vault:v1:sig{index}"),
    }
    values.update(kw)
    return Checkpoint(**values)


class CheckpointAnchorsContract:
    def make(self, path: Path) -> CheckpointAnchors:
        raise NotImplementedError

    @pytest.fixture
    def anchors(self, tmp_path: Path) -> CheckpointAnchors:
        return self.make(tmp_path)

    def test_an_anchor_reads_back_exactly(self, anchors: CheckpointAnchors) -> None:
        assert anchors.of_tenant("acme") == []
        assert anchors.advance(cp(1))
        assert anchors.of_tenant("acme") == [cp(1)]
        assert anchors.of_tenant("acme")[0].signed_at == cp(1).signed_at

    def test_an_anchor_moves_forward_only(self, anchors: CheckpointAnchors) -> None:
        assert anchors.advance(cp(2))  # the first anchor of a stream may be any checkpoint
        assert not anchors.advance(cp(1))  # older: kept at 2
        assert not anchors.advance(cp(2, hash="f" * 64))  # the same index: kept as it was
        assert anchors.of_tenant("acme") == [cp(2)]
        assert anchors.advance(cp(3))
        assert not anchors.advance(cp(2))
        assert anchors.of_tenant("acme") == [cp(3)]

    def test_an_anchor_moves_along_one_chain(self, anchors: CheckpointAnchors) -> None:
        assert anchors.advance(cp(3))
        with pytest.raises(ConflictError) as gap:
            anchors.advance(cp(5))  # checkpoint 4 first
        assert gap.value.code == "AUDIT_ANCHOR_GAP"
        # the next index, but signed over a chain that does not pass through the anchor
        # (a store rolled back to checkpoint 1, then signed again)
        forked = cp(4, prev=checkpoint_digest(cp(3, hash="e" * 64)))
        with pytest.raises(ConflictError) as fork:
            anchors.advance(forked)
        assert fork.value.code == "AUDIT_CHECKPOINT_ROLLBACK"
        assert anchors.of_tenant("acme") == [cp(3)]
        assert anchors.advance(cp(4))
        assert anchors.advance(cp(5))
        assert anchors.of_tenant("acme") == [cp(5)]

    def test_racing_writers_leave_the_highest(self, tmp_path: Path) -> None:
        first, second = self.make(tmp_path), self.make(tmp_path)
        moved: list[int] = []

        def write(anchors: CheckpointAnchors, indexes: range) -> None:
            for i in indexes:
                if anchors.advance(cp(i)):
                    moved.append(i)

        threads = [
            threading.Thread(target=write, args=(first, range(1, 13))),
            threading.Thread(target=write, args=(second, range(1, 13))),
        ]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert first.of_tenant("acme") == [cp(12)]
        assert sorted(moved) == list(range(1, 13))  # each step taken once, by one of them
        assert not second.advance(cp(11))

    def test_a_writer_that_fell_behind_another_decides_on_the_anchor_as_it_is(
        self, tmp_path: Path
    ) -> None:
        first, second = self.make(tmp_path), self.make(tmp_path)
        assert first.advance(cp(1))
        assert second.advance(cp(2))  # the first writer has not seen this one
        assert not first.advance(cp(2))  # already there: left as it is
        assert second.advance(cp(3))
        assert first.advance(cp(4))  # the next after the anchor as it is, not as last written
        with pytest.raises(ConflictError) as gap:
            second.advance(cp(6))
        assert gap.value.code == "AUDIT_ANCHOR_GAP"
        assert first.of_tenant("acme") == [cp(4)]
        assert second.of_tenant("acme") == [cp(4)]

    def test_tenants_and_streams_are_apart(self, anchors: CheckpointAnchors) -> None:
        assert anchors.advance(cp(3, stream="user:U2"))
        assert anchors.advance(cp(1))
        assert anchors.advance(cp(7, tenant="globex"))
        assert anchors.of_tenant("acme") == [cp(1), cp(3, stream="user:U2")]
        assert anchors.of_tenant("globex") == [cp(7, tenant="globex")]
        assert anchors.of_tenant("nobody") == []

    def test_odd_stream_names_are_only_data(self, anchors: CheckpointAnchors) -> None:
        odd = [cp(1, stream="user:ü\t%/../x"), cp(1, stream="agent:a.b@c-d_e")]
        for c in odd:
            assert anchors.advance(c)
        assert sorted(anchors.of_tenant("acme"), key=lambda c: c.stream) == sorted(
            odd, key=lambda c: c.stream
        )


class TestSqliteCheckpointAnchors(CheckpointAnchorsContract):
    def make(self, path: Path) -> CheckpointAnchors:
        return SqliteCheckpointAnchors(path / "keys" / "audit-anchors.sqlite3", "NORMAL")


class TestVaultKvAnchors(CheckpointAnchorsContract):
    @pytest.fixture(autouse=True)
    def _vault(self) -> None:
        url, token = vault_settings()
        if token is None:
            missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
        self.url, self.token = url, token
        self.prefix = f"anchor{uuid.uuid4().hex[:10]}"
        from mnemo.adapters.vault_anchors import VaultKvAnchors

        try:
            VaultKvAnchors(url, token, prefix=self.prefix).of_tenant("acme")
        except Unavailable as exc:
            missing("OpenBao", exc.message)

    def make(self, path: Path) -> CheckpointAnchors:
        from mnemo.adapters.vault_anchors import VaultKvAnchors

        return VaultKvAnchors(self.url, self.token, prefix=self.prefix)

    def test_the_vault_refuses_a_write_without_check_and_set(self, tmp_path: Path) -> None:
        from hvac import exceptions

        anchors = self.make(tmp_path)
        assert anchors.advance(cp(4))
        kv: Any = anchors._kv  # type: ignore[attr-defined]
        mount = anchors.mount  # type: ignore[attr-defined]
        path = f"{self.prefix}/acme/{b'user:U1'.hex()}"
        with pytest.raises(exceptions.InvalidRequest):
            kv.create_or_update_secret(path=path, secret={"format": 1}, mount_point=mount)
        # and one naming an old version (a writer that read before the last move)
        with pytest.raises(exceptions.InvalidRequest):
            kv.create_or_update_secret(path=path, secret={"format": 1}, cas=0, mount_point=mount)
        assert anchors.of_tenant("acme") == [cp(4)]

    def test_a_writer_moving_its_own_anchor_writes_without_reading_it_first(
        self, tmp_path: Path
    ) -> None:
        anchors: Any = self.make(tmp_path)
        reads: list[str] = []
        read = anchors._read

        def counted(path: str) -> Any:
            reads.append(path)
            return read(path)

        anchors._read = counted
        assert anchors.advance(cp(1))
        assert len(reads) == 1  # a stream it has not written yet: read once
        for i in range(2, 6):
            assert anchors.advance(cp(i))
        assert len(reads) == 1  # then each move is one check-and-set write
        other = self.make(tmp_path)
        assert other.advance(cp(6))
        assert anchors.advance(cp(7))  # refused on the old version, then read and decided
        assert len(reads) == 2
        assert other.of_tenant("acme") == [cp(7)]

    def test_an_unreachable_vault_is_unavailable_never_empty(self) -> None:
        from mnemo.adapters.vault_anchors import VaultKvAnchors

        away = VaultKvAnchors("http://127.0.0.1:9", "s.unused", prefix=self.prefix, timeout=0.5)
        with pytest.raises(Unavailable) as reading:
            away.of_tenant("acme")
        assert reading.value.code == "VAULT_UNAVAILABLE"
        with pytest.raises(Unavailable):
            away.advance(cp(1))
