"""Finding 11: the read ports open sealed values once, for every use case. The console,
the API and the context assembler read the same text, and the context's token count is
made on the text the model receives, not on placeholders."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pytest
from mnemo_gateway.routes.console import insights_of

from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.ids import new_event_id
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest
from mnemo.settings import MnemoSettings

PHONE = "13800138000"
CARD = "6222021234567890128"
CTX = RequestContext("acme", "agent-1")


@pytest.fixture
def platform(tmp_path: Path) -> Iterator[Platform]:
    built = build_embedded(
        MnemoSettings(data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL"),
        vault=InMemoryKeyVault(),
    )
    built.app.publish(
        CTX,
        [
            {
                "event_id": new_event_id(datetime.now(UTC)),
                "type": "MemoryDeclared",
                "schema_version": 1,
                "stream": stream,
                "payload": {
                    "memory": {
                        "type": "fact",
                        "content": f"call me on {PHONE} after six, card {CARD} for refunds",
                    }
                },
            }
            for stream in ("user:U1", "agent:A1")  # sealed whole, and detector-only
        ],
    )
    built.runner.drain()
    yield built
    built.close()


@pytest.mark.parametrize("stream", ["user:U1", "agent:A1"])
def test_console_and_api_read_the_same_text(platform: Platform, stream: str) -> None:
    (memory,) = platform.app.list_memories(CTX, stream)
    assert PHONE in memory.content  # the API opens the sealed values
    console = insights_of(platform)
    (cell,) = console.heatmap(CTX, stream).cells
    assert cell.memory.content == memory.content
    assert console.life(CTX, memory.memory_id).memory.content == memory.content
    (hit,) = platform.app.search(CTX, "refunds", streams=[stream])
    assert hit.memory.content == memory.content


@pytest.mark.parametrize("stream", ["user:U1", "agent:A1"])
def test_context_tokens_are_counted_on_what_the_model_receives(
    platform: Platform, stream: str
) -> None:
    response = platform.app.context(CTX, ContextRequest(subjects=(stream,), budget=400))
    text = response.assembly.text
    assert PHONE in text
    assert "⟦" not in text
    assert response.assembly.tokens == platform.app.tokenizer.count([text])[0]
    platform.runner.drain()
    shown = insights_of(platform).context(CTX, response.request_id).record
    assert shown.tokens == response.assembly.tokens
    assert shown.rendered is not None
    assert PHONE in shown.rendered
