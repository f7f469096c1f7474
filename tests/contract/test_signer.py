"""Contract: a Signer's signatures verify over exactly the message they were made for, and
only under its own key; anything else (another message, another key, a malformed value)
is False, never an error. Run against the development key file and OpenBao's transit
engine, whose key the audit writers can use but never read."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.adapters.local_signer import LocalFileSigner
from mnemo.domain.checkpoint import Signature
from mnemo.domain.errors import Unavailable
from mnemo.ports import Signer

MESSAGE = b"mnemo-audit-checkpoint/1\tacme\tuser%3AU1\t1\t7\t" + b"a" * 64


class SignerContract:
    @pytest.fixture
    def signer(self) -> Signer:
        raise NotImplementedError

    @pytest.fixture
    def other(self) -> Signer:
        """A signer of the same kind with another key."""
        raise NotImplementedError

    @pytest.fixture
    def again(self, signer: Signer) -> Signer:
        """A second signer on the same key (a restarted process)."""
        raise NotImplementedError

    def test_a_signature_verifies_over_its_message(self, signer: Signer) -> None:
        signature = signer.sign("acme", MESSAGE)
        assert signature.key_version == 1
        assert signer.verify("acme", MESSAGE, signature)

    def test_another_message_does_not_verify(self, signer: Signer) -> None:
        signature = signer.sign("acme", MESSAGE)
        assert not signer.verify("acme", MESSAGE.replace(b"\t7\t", b"\t8\t"), signature)
        assert not signer.verify("acme", MESSAGE + b"x", signature)
        assert not signer.verify("acme", b"", signature)

    def test_another_keys_signature_does_not_verify(self, signer: Signer, other: Signer) -> None:
        theirs = other.sign("acme", MESSAGE)
        assert other.verify("acme", MESSAGE, theirs)
        assert not signer.verify("acme", MESSAGE, theirs)

    def test_malformed_signatures_are_false(self, signer: Signer) -> None:
        good = signer.sign("acme", MESSAGE)
        prefix, _, body = good.value.rpartition(":")
        flipped = body[:10] + ("A" if body[10] != "A" else "B") + body[11:]
        for value in ("", "x", "vault:v1:", "local:v1:AAAA", "vault:v1:AAAA", f"{prefix}:"):
            assert not signer.verify("acme", MESSAGE, Signature(1, value))
        assert not signer.verify("acme", MESSAGE, Signature(1, f"{prefix}:{flipped}"))
        # the version said beside the value must be the value's own
        assert not signer.verify("acme", MESSAGE, Signature(2, good.value))

    def test_the_key_outlives_the_process(self, signer: Signer, again: Signer) -> None:
        signature = signer.sign("acme", MESSAGE)
        assert again.verify("acme", MESSAGE, signature)
        assert signer.verify("acme", MESSAGE, again.sign("acme", MESSAGE))

    def test_a_batch_signs_each_message_in_its_order(self, signer: Signer) -> None:
        messages = [
            ("acme", MESSAGE),
            ("globex", MESSAGE.replace(b"acme", b"globex")),
            ("acme", MESSAGE.replace(b"\t7\t", b"\t8\t")),
        ]
        signatures = signer.sign_many(messages)
        assert len(signatures) == len(messages)
        for i, (tenant, message) in enumerate(messages):
            for j, signature in enumerate(signatures):
                assert signer.verify(tenant, message, signature) is (i == j)
        assert signer.sign_many([]) == []
        [one] = signer.sign_many([("acme", MESSAGE)])
        assert signer.verify("acme", MESSAGE, one)

    def test_a_batch_larger_than_one_request_takes_is_signed_whole(self, signer: Signer) -> None:
        # OpenBao refuses a request of 500 batch items or more; the adapter splits it
        messages = [("acme", MESSAGE + str(i).encode()) for i in range(600)]
        signatures = signer.sign_many(messages)
        assert len(signatures) == 600
        for i in (0, 249, 250, 499, 500, 599):
            assert signer.verify("acme", messages[i][1], signatures[i])
            assert not signer.verify("acme", messages[i][1], signatures[(i + 1) % 600])

    def test_signatures_are_not_plain_digests_of_the_message(self, signer: Signer) -> None:
        import hashlib

        value = signer.sign("acme", MESSAGE).value
        assert hashlib.sha256(MESSAGE).hexdigest() not in value


class TestLocalFileSigner(SignerContract):
    @pytest.fixture
    def signer(self, tmp_path: Path) -> Signer:
        return LocalFileSigner(tmp_path / "keys" / "audit-signing.json")

    @pytest.fixture
    def other(self, tmp_path: Path) -> Signer:
        return LocalFileSigner(tmp_path / "other" / "audit-signing.json")

    @pytest.fixture
    def again(self, tmp_path: Path, signer: Signer) -> Signer:
        return LocalFileSigner(tmp_path / "keys" / "audit-signing.json")

    def test_the_key_file_is_private_and_says_development_only(
        self, tmp_path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        path = tmp_path / "k" / "audit-signing.json"
        with caplog.at_level("WARNING"):
            LocalFileSigner(path)
        assert path.stat().st_mode & 0o777 == 0o600
        assert "development only" in caplog.text

    def test_a_damaged_key_file_is_unavailable_without_its_content(self, tmp_path: Path) -> None:
        path = tmp_path / "audit-signing.json"
        path.write_text('{"format": 1, "ed25519": "c2VjcmV0LXNlZWQ="}', encoding="utf-8")
        with pytest.raises(Unavailable) as info:
            LocalFileSigner(path)
        assert info.value.code == "AUDIT_SIGNER_UNAVAILABLE"
        assert "c2VjcmV0" not in str(info.value)


# ---- OpenBao transit: the same contract against the real engine ------------------------------


def _transit(name: str, **extra: Any) -> Signer:
    from mnemo.adapters.vault_signer import VaultTransitSigner

    url, token = vault_settings()
    if token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    signer = VaultTransitSigner(url, token, name, timeout=3, **extra)
    try:
        signer.sign("probe", b"probe")
    except Unavailable as exc:
        if exc.code == "VAULT_UNAVAILABLE":
            missing("OpenBao", f"{url}: {exc.message}")
        raise
    return signer


class TestVaultTransitSigner(SignerContract):
    @pytest.fixture
    def name(self) -> str:
        return f"audit-{uuid.uuid4().hex[:12]}"

    @pytest.fixture
    def signer(self, name: str) -> Signer:
        return _transit(name)

    @pytest.fixture
    def other(self) -> Signer:
        return _transit(f"audit-{uuid.uuid4().hex[:12]}")

    @pytest.fixture
    def again(self, name: str, signer: Signer) -> Signer:
        return _transit(name)

    def test_the_key_is_an_ed25519_key_that_never_leaves_the_vault(
        self, signer: Signer, name: str
    ) -> None:
        import hvac

        url, token = vault_settings()
        client = hvac.Client(url=url, token=token)
        data = client.secrets.transit.read_key(name=name)["data"]
        assert data["type"] == "ed25519"
        assert data["exportable"] is False
        assert data["allow_plaintext_backup"] is False
        with pytest.raises(hvac.exceptions.InvalidRequest):
            client.secrets.transit.export_key(name=name, key_type="signing-key")
        assert signer.sign("acme", MESSAGE).value.startswith("vault:v1:")

    def test_ecdsa_p256_keys_sign_too(self) -> None:
        signer = _transit(f"audit-{uuid.uuid4().hex[:12]}", key_type="ecdsa-p256")
        assert signer.verify("acme", MESSAGE, signer.sign("acme", MESSAGE))

    def test_a_key_of_that_name_that_cannot_sign_is_refused(self) -> None:
        import hvac

        from mnemo.adapters.vault_signer import VaultTransitSigner

        url, token = vault_settings()
        if token is None:
            missing("OpenBao", "no token")
        name = f"audit-{uuid.uuid4().hex[:12]}"
        client = hvac.Client(url=url, token=token)
        try:
            client.secrets.transit.create_key(name=name, key_type="aes256-gcm96")
        except Exception as exc:
            missing("OpenBao", f"{url}: {type(exc).__name__}")
        signer = VaultTransitSigner(url, token, name)
        for call in (
            lambda: signer.sign("acme", MESSAGE),
            lambda: signer.verify("acme", MESSAGE, Signature(1, "vault:v1:AAAA")),
        ):
            with pytest.raises(Unavailable) as info:
                call()
            assert info.value.code == "AUDIT_SIGNING_KEY_INVALID"

    def test_a_writer_policy_signs_and_verifies_but_cannot_take_the_key(
        self, signer: Signer, name: str
    ) -> None:
        """What the audit consumer's token may do (docs/security.md): sign and verify with
        the key, read its public part, nothing more."""
        import hvac

        from mnemo.adapters.vault_signer import VaultTransitSigner

        url, root = vault_settings()
        admin = hvac.Client(url=url, token=root)
        policy = f"mnemo-audit-writer-{uuid.uuid4().hex[:8]}"
        admin.sys.create_or_update_policy(
            name=policy,
            policy=(
                f'path "transit/sign/{name}" {{ capabilities = ["update"] }}\n'
                f'path "transit/verify/{name}" {{ capabilities = ["update"] }}\n'
                f'path "transit/keys/{name}" {{ capabilities = ["read"] }}\n'
            ),
        )
        try:
            token = admin.auth.token.create(policies=[policy], ttl="5m")["auth"]["client_token"]
            writer = VaultTransitSigner(url, token, name)
            signature = writer.sign("acme", MESSAGE)
            assert signer.verify("acme", MESSAGE, signature)
            assert writer.verify("acme", MESSAGE, signature)
            limited = hvac.Client(url=url, token=token)
            with pytest.raises(hvac.exceptions.Forbidden):
                limited.secrets.transit.export_key(name=name, key_type="signing-key")
            with pytest.raises(hvac.exceptions.Forbidden):
                limited.secrets.transit.update_key_configuration(name=name, deletion_allowed=True)
            with pytest.raises(hvac.exceptions.Forbidden):
                limited.secrets.transit.create_key(name=f"{name}-2", key_type="ed25519")
            assert token not in repr(writer)
        finally:
            admin.sys.delete_policy(name=policy)

    def test_an_unreachable_vault_is_unavailable_without_the_token(self) -> None:
        from mnemo.adapters.vault_signer import VaultTransitSigner

        token = "s.never-shown-" + uuid.uuid4().hex
        signer = VaultTransitSigner("http://127.0.0.1:9", token, "mnemo-audit", timeout=0.5)
        for call in (
            lambda: signer.sign("acme", MESSAGE),
            lambda: signer.verify("acme", MESSAGE, Signature(1, "vault:v1:AAAA")),
        ):
            with pytest.raises(Unavailable) as info:
                call()
            assert info.value.code == "VAULT_UNAVAILABLE"
            assert token not in str(info.value)
        assert token not in repr(signer)
