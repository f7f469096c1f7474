"""The encryption block: which key sealed which values of an event (or of a memory)."""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field

__all__ = ["EncryptionBlock", "without_secrets"]


class EncryptionBlock(BaseModel):
    """Envelope encryption of an event's sensitive values.

    Each sensitive value was replaced in the payload by a placeholder ``⟦kind:token⟧``; its
    AES-256-GCM ciphertext sits in `values` under the placeholder's ref (``kind:token``).
    The data key that sealed them travels wrapped by the vault key `key_id` at
    `key_version`; destroying that key makes every value here unreadable.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_id: str = Field(min_length=1, max_length=256)
    key_version: int = Field(ge=1)
    algorithm: str = Field(default="AES-256-GCM", max_length=32)
    fields: tuple[Annotated[str, Field(max_length=256)], ...] = Field(
        default=(), max_length=64, description="payload paths holding placeholders"
    )
    wrapped_key: str | None = Field(
        default=None, max_length=4_096, description="the data key, wrapped by the vault (base64)"
    )
    values: dict[Annotated[str, Field(max_length=64)], Annotated[str, Field(max_length=65_536)]] = (
        Field(
            default_factory=dict,
            max_length=512,
            description="placeholder ref -> base64(nonce + ciphertext + tag); empty once opened",
        )
    )


def without_secrets(block: EncryptionBlock) -> EncryptionBlock:
    """The block as views may show it: which key and version sealed which fields, without
    the wrapped data key or any ciphertext (copied elsewhere, those could bring a forgotten
    value back while the key that wrapped them lives on)."""
    return block.model_copy(update={"wrapped_key": None, "values": {}})
