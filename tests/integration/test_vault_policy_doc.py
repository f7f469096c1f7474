"""The Vault policy docs/deploy.md gives Mnemo's token, on the real OpenBao: a token with
exactly that policy (and Vault's default one) seals and opens, searches, rotates and
shreds tenant keys, gives the vault's identity, signs and verifies audit checkpoints and
writes and reads their anchors, as every component of the chart does with its one token.
The policy the guide gave before missed the mount list, HMAC, signing and the anchors:
every sensitive publish then failed with VAULT_UNAVAILABLE."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from datetime import UTC, datetime

import hvac
import pytest
from tests.support import missing, stack_module
from tests.vault_support import vault_settings

from mnemo.adapters.vault_anchors import VaultKvAnchors
from mnemo.adapters.vault_key_vault import VaultKeyVault
from mnemo.adapters.vault_signer import VaultTransitSigner
from mnemo.domain.checkpoint import FIRST, Checkpoint, Signature

SIGNED_AT = datetime(2026, 12, 2, 12, 0, 0, 123456, tzinfo=UTC)


@pytest.fixture
def token() -> Iterator[tuple[str, str, str]]:
    url, root = vault_settings()
    if root is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    admin = hvac.Client(url=url, token=root)
    # the mounts exist, as the guide asks of the operator (a development vault may be fresh)
    VaultKeyVault(url, root, prefix="policycheck").has_key("acme")
    VaultKvAnchors(url, root, prefix="policycheck").of_tenant("acme")
    tag = uuid.uuid4().hex[:10]
    # the names an operator replaces with their settings: this test's own, so that it
    # shreds no key of anyone else's on a shared vault
    # the guide's block, read as `make up` reads it for its components' token
    policy = stack_module().component_policy(
        {
            "transit": "transit",
            "anchors": "mnemo-anchors",
            "signing": f"mnemo-audit-{tag}",
            "prefix": f"doc{tag}",
        }
    )
    assert f"mnemo-anchors/data/doc{tag}/*" in policy
    name = f"mnemo-deploy-doc-{tag}"
    admin.sys.create_or_update_policy(name=name, policy=policy)
    try:
        made = admin.auth.token.create(policies=[name], ttl="5m")
        yield url, made["auth"]["client_token"], tag
    finally:
        admin.sys.delete_policy(name=name)


def test_a_token_with_the_documented_policy_does_what_mnemo_asks_of_the_vault(
    token: tuple[str, str, str],
) -> None:
    url, secret, tag = token
    keys = VaultKeyVault(url, secret, prefix=f"doc{tag}")
    plaintext, wrapped, version = keys.data_key("acme")
    assert keys.unwrap("acme", wrapped) == plaintext
    assert version == 1
    assert len(keys.search_key("acme")) == 32
    assert keys.rotate("acme") == 2
    rewrapped, now = keys.rewrap("acme", wrapped)
    assert now == 2
    assert keys.unwrap("acme", rewrapped) == plaintext
    assert keys.has_key("acme")
    keys.destroy("acme")
    assert keys.is_destroyed("acme")
    # the vault's identity, which every start compares with the recorded one
    assert keys.identity(create=False) is None
    made = keys.identity(create=True)
    assert made is not None
    assert keys.identity(create=False) == made

    signer = VaultTransitSigner(url, secret, f"mnemo-audit-{tag}")
    signature = signer.sign("acme", b"a checkpoint")
    assert signer.verify("acme", b"a checkpoint", signature)

    anchors = VaultKvAnchors(url, secret, prefix=f"doc{tag}")
    first = Checkpoint(
        tenant="acme",
        stream="user:U1",
        index=1,
        n=10,
        hash="0" * 64,
        prev=FIRST,
        signed_at=SIGNED_AT,
        signature=Signature(1, signature.value),
    )
    assert anchors.advance(first)
    assert anchors.of_tenant("acme") == [first]
