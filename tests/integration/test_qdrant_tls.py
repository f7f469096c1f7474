"""The Qdrant server index over HTTPS with an API key, as production runs it (the chart's
`qdrant.tls.caSecret` and `qdrant.apiKey`): against the second local Qdrant server, which
only speaks TLS with the development CA's certificate and requires a key (qdrant-tls).
The right CA and key work; the system's CAs, another CA, a wrong key or no key are refused
with a coded error that never shows the key; an unreadable CA file stops the start with
the setting's name."""

from __future__ import annotations

import uuid
from pathlib import Path

import pytest
from tests.tls_support import TlsServices, rogue_ca, tls_services

from mnemo.bootstrap import make_index
from mnemo.domain.errors import InvalidInput, MnemoError
from mnemo.ports import SparseVector, VectorIndex, VectorPoint
from mnemo.settings import MnemoSettings

DIM = 8


@pytest.fixture(scope="module")
def tls() -> TlsServices:
    return tls_services(qdrant=True)


def settings(tls: TlsServices, **overrides: object) -> MnemoSettings:
    values: dict[str, object] = {
        "qdrant_url": tls.qdrant_url,
        "qdrant_api_key": tls.qdrant_api_key,
        "qdrant_ca_file": tls.ca,
        "qdrant_collection": f"tls_{uuid.uuid4().hex[:10]}",
    }
    values.update(overrides)
    return MnemoSettings(**values)  # type: ignore[arg-type]


def one_point(n: int) -> VectorPoint:
    return VectorPoint(
        memory_id=str(uuid.UUID(int=n + 1)),
        tenant="acme",
        stream="user:u1",
        type="fact",
        scope="shared",
        tags=(),
        vector=[1.0 if i == n % DIM else 0.0 for i in range(DIM)],
        keywords=SparseVector((7,), (1.0,)),
    )


def round_trip(index: VectorIndex) -> None:
    index.upsert([one_point(0), one_point(1)])
    assert sorted(index.ids("acme")) == sorted(one_point(n).memory_id for n in (0, 1))
    hits = index.search("acme", one_point(1).vector, 1)
    assert [memory_id for memory_id, _ in hits][:1] == [one_point(1).memory_id]


def test_the_right_ca_and_key_reach_the_https_server(tls: TlsServices) -> None:
    index = make_index(settings(tls), DIM)
    try:
        round_trip(index)
    finally:
        index.clear()
        index.close()


@pytest.mark.parametrize("wrong", ["system CAs", "another CA", "wrong key", "no key"])
def test_a_wrong_ca_or_key_is_refused_with_a_code_and_no_key(
    tls: TlsServices, tmp_path: Path, wrong: str
) -> None:
    overrides: dict[str, object] = {
        "system CAs": {"qdrant_ca_file": None},
        "another CA": {"qdrant_ca_file": rogue_ca(tmp_path)[0]},
        "wrong key": {"qdrant_api_key": "not-the-" + tls.qdrant_api_key},
        "no key": {"qdrant_api_key": None},
    }[wrong]
    index = make_index(settings(tls, **overrides), DIM)
    try:
        with pytest.raises(MnemoError) as caught:
            round_trip(index)
        assert caught.value.code == "UNAVAILABLE"
        assert tls.qdrant_api_key not in str(caught.value)
    finally:
        index.close()


def test_an_unreadable_ca_file_names_the_setting(tls: TlsServices, tmp_path: Path) -> None:
    with pytest.raises(InvalidInput) as caught:
        make_index(settings(tls, qdrant_ca_file=tmp_path / "absent.pem"), DIM)
    assert caught.value.code == "TLS_CONFIG_INVALID"
    assert caught.value.field == "qdrant_ca_file"
