"""Contract: a KeyVault hands out wrapped 256-bit data keys, unwraps them across
rotations, and after destroy can never unwrap them again."""

from __future__ import annotations

import base64
import json
import logging
import stat
import uuid
from pathlib import Path

import pytest
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.adapters.local_key_vault import LocalKeyFileVault
from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.domain.errors import InvalidInput, KeyDestroyed, Unavailable
from mnemo.ports import IDENTITY_KEY_ID, KeyVault


class KeyVaultContract:
    @pytest.fixture
    def vault(self) -> KeyVault:
        raise NotImplementedError

    @pytest.fixture
    def other_vault(self) -> KeyVault:
        """A vault of the same kind that holds none of `vault`'s keys."""
        raise NotImplementedError

    def test_data_key_round_trip(self, vault: KeyVault) -> None:
        plaintext, wrapped, version = vault.data_key("tenant-a")
        assert isinstance(plaintext, bytes)
        assert len(plaintext) == 32
        assert version == 1
        assert vault.unwrap("tenant-a", wrapped) == plaintext

    def test_data_keys_are_fresh(self, vault: KeyVault) -> None:
        first, wrapped_1, _ = vault.data_key("tenant-a")
        second, wrapped_2, _ = vault.data_key("tenant-a")
        assert first != second
        assert wrapped_1 != wrapped_2

    def test_wrapped_never_contains_plaintext(self, vault: KeyVault) -> None:
        for _ in range(20):
            plaintext, wrapped, _ = vault.data_key("tenant-a")
            assert plaintext not in wrapped
            assert plaintext[:8] not in wrapped

    def test_rotate(self, vault: KeyVault) -> None:
        old_plain, old_wrapped, v1 = vault.data_key("tenant-a")
        v2 = vault.rotate("tenant-a")
        assert v2 == v1 + 1
        new_plain, new_wrapped, version = vault.data_key("tenant-a")
        assert version == v2
        assert vault.unwrap("tenant-a", old_wrapped) == old_plain
        assert vault.unwrap("tenant-a", new_wrapped) == new_plain
        assert vault.rotate("tenant-a") == v2 + 1

    def test_rotate_creates_an_unknown_key(self, vault: KeyVault) -> None:
        assert vault.rotate("tenant-new") == 1
        assert vault.data_key("tenant-new")[2] == 1

    def test_destroy(self, vault: KeyVault) -> None:
        _, wrapped_1, _ = vault.data_key("tenant-a")
        vault.rotate("tenant-a")
        _, wrapped_2, _ = vault.data_key("tenant-a")
        vault.destroy("tenant-a")
        for wrapped in (wrapped_1, wrapped_2):
            with pytest.raises(KeyDestroyed) as info:
                vault.unwrap("tenant-a", wrapped)
            assert info.value.code == "KEY_DESTROYED"

    def test_destroyed_key_is_not_recreated(self, vault: KeyVault) -> None:
        vault.data_key("tenant-a")
        vault.destroy("tenant-a")
        with pytest.raises(KeyDestroyed):
            vault.data_key("tenant-a")
        with pytest.raises(KeyDestroyed):
            vault.rotate("tenant-a")
        vault.destroy("tenant-a")  # idempotent

    def test_has_key_says_whether_sealing_makes_a_key(self, vault: KeyVault) -> None:
        assert not vault.has_key("t1/user:new")
        assert not vault.has_key("t1/user:new")  # asking made nothing
        vault.data_key("t1/user:new")
        assert vault.has_key("t1/user:new")
        assert not vault.has_key("t1/user:other")
        vault.search_key("t1/user:searched")
        assert vault.has_key("t1/user:searched")
        assert not vault.is_destroyed("t1/user:new")
        vault.destroy("t1/user:new")
        assert not vault.has_key("t1/user:new")
        assert vault.is_destroyed("t1/user:new")
        assert not vault.is_destroyed("t1/user:other")  # never made is not destroyed

    def test_destroy_leaves_other_keys_alone(self, vault: KeyVault) -> None:
        _, wrapped_a, _ = vault.data_key("tenant-a")
        plain_b, wrapped_b, _ = vault.data_key("tenant-b")
        vault.destroy("tenant-a")
        assert vault.unwrap("tenant-b", wrapped_b) == plain_b
        with pytest.raises(KeyDestroyed):
            vault.unwrap("tenant-a", wrapped_a)

    def test_unknown_key_id(self, vault: KeyVault) -> None:
        _, wrapped, _ = vault.data_key("tenant-a")
        with pytest.raises(KeyDestroyed):
            vault.unwrap("never-created", wrapped)

    def test_wrapped_key_is_bound_to_its_key_id(self, vault: KeyVault) -> None:
        _, wrapped, _ = vault.data_key("tenant-a")
        vault.data_key("tenant-b")
        with pytest.raises(InvalidInput) as info:
            vault.unwrap("tenant-b", wrapped)
        assert info.value.code == "BAD_WRAPPED_KEY"

    def test_tampered_or_malformed(self, vault: KeyVault) -> None:
        _, wrapped, _ = vault.data_key("tenant-a")
        tampered = wrapped[:-1] + bytes([wrapped[-1] ^ 1])
        for bad in (tampered, b"", b"garbage", b"v9:" + wrapped[3:], wrapped[:-1]):
            with pytest.raises(InvalidInput):
                vault.unwrap("tenant-a", bad)

    def test_rejects_empty_key_id(self, vault: KeyVault) -> None:
        with pytest.raises(InvalidInput):
            vault.data_key("")

    def test_rewrap_moves_to_the_current_version(self, vault: KeyVault) -> None:
        plaintext, wrapped, v1 = vault.data_key("tenant-a")
        v2 = vault.rotate("tenant-a")
        rewrapped, version = vault.rewrap("tenant-a", wrapped)
        assert version == v2
        assert rewrapped != wrapped
        assert vault.unwrap("tenant-a", rewrapped) == plaintext
        assert vault.unwrap("tenant-a", wrapped) == plaintext  # the old version still works
        assert v2 == v1 + 1
        vault.destroy("tenant-a")
        with pytest.raises(KeyDestroyed):
            vault.rewrap("tenant-a", rewrapped)

    def test_identity_is_made_once_and_is_this_vaults_own(
        self, vault: KeyVault, other_vault: KeyVault
    ) -> None:
        vault.data_key("tenant-a")
        # asked without `create`, a vault that never gave its identity has none, and makes
        # nothing by being asked
        assert vault.identity(create=False) is None
        assert not vault.has_key(IDENTITY_KEY_ID)
        made = vault.identity(create=True)
        assert made is not None
        assert len(made) == 32
        assert vault.identity(create=False) == made
        assert vault.identity(create=True) == made
        assert vault.rotate(IDENTITY_KEY_ID) >= 2
        assert vault.identity(create=False) == made  # the same across the key's versions
        # a digest, never the keyed hash's own key; another vault's identity differs
        assert made != vault.search_key(IDENTITY_KEY_ID)
        assert other_vault.identity(create=False) is None
        assert other_vault.identity(create=True) not in (None, made)

    def test_search_key_is_stable_and_shredded(self, vault: KeyVault) -> None:
        first = vault.search_key("tenant-a")
        assert len(first) == 32
        vault.rotate("tenant-a")
        assert vault.search_key("tenant-a") == first
        assert vault.search_key("tenant-b") != first
        vault.destroy("tenant-a")
        with pytest.raises(KeyDestroyed):
            vault.search_key("tenant-a")


class TestInMemoryKeyVault(KeyVaultContract):
    @pytest.fixture
    def vault(self) -> KeyVault:
        return InMemoryKeyVault()

    @pytest.fixture
    def other_vault(self) -> KeyVault:
        return InMemoryKeyVault()


class TestVaultKeyVault(KeyVaultContract):
    """The transit adapter on a real OpenBao; every test gets its own key prefix."""

    @pytest.fixture
    def vault(self) -> KeyVault:
        from mnemo.adapters.vault_key_vault import VaultKeyVault

        url, token = vault_settings()
        if token is None:
            missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
        vault = VaultKeyVault(url, token, prefix=f"t{uuid.uuid4().hex[:12]}", timeout=3)
        try:
            vault.rotate("probe")
        except Unavailable as exc:
            missing("OpenBao", f"{url}: {exc.message}")
        return vault

    @pytest.fixture
    def other_vault(self, vault: KeyVault) -> KeyVault:
        """The same server under another key prefix: other keys, so another identity."""
        from mnemo.adapters.vault_key_vault import VaultKeyVault

        url, token = vault_settings()
        assert token is not None
        return VaultKeyVault(url, token, prefix=f"t{uuid.uuid4().hex[:12]}", timeout=3)

    def test_wrapped_is_transit_ciphertext(self, vault: KeyVault) -> None:
        _, wrapped, _ = vault.data_key("tenant-a")
        assert wrapped.startswith(b"vault:v1:")

    def test_destroy_deletes_the_transit_key(self, vault: KeyVault) -> None:
        from mnemo.adapters.vault_key_vault import VaultKeyVault

        assert isinstance(vault, VaultKeyVault)
        vault.data_key("tenant-a")
        name = vault.name_of("tenant-a")
        transit = vault._client.secrets.transit
        assert transit.read_key(name=name, mount_point=vault.mount)["data"]["name"] == name
        vault.destroy("tenant-a")
        import hvac.exceptions

        with pytest.raises(hvac.exceptions.InvalidPath):
            transit.read_key(name=name, mount_point=vault.mount)

    def test_unreachable_vault_is_unavailable_without_the_token(self) -> None:
        from mnemo.adapters.vault_key_vault import VaultKeyVault

        token = "s.never-shown-" + uuid.uuid4().hex
        vault = VaultKeyVault("http://127.0.0.1:9", token, timeout=0.5)
        for call in (
            lambda: vault.data_key("tenant-a"),
            lambda: vault.unwrap("tenant-a", b"vault:v1:AAAA"),
            lambda: vault.destroy("tenant-a"),
        ):
            with pytest.raises(Unavailable) as info:
                call()
            assert info.value.code == "VAULT_UNAVAILABLE"
            assert token not in str(info.value)
            assert info.value.__cause__ is None
        assert token not in repr(vault)

    def test_wrong_token_is_unavailable(self) -> None:
        from mnemo.adapters.vault_key_vault import VaultKeyVault

        url, token = vault_settings()
        if token is None:
            missing("OpenBao", "no token")
        bad = "s.wrong-" + uuid.uuid4().hex
        vault = VaultKeyVault(url, bad, prefix=f"t{uuid.uuid4().hex[:12]}", timeout=3)
        with pytest.raises(Unavailable) as info:
            vault.data_key("tenant-a")
        assert bad not in str(info.value)


class TestLocalKeyFileVault(KeyVaultContract):
    @pytest.fixture
    def path(self, tmp_path: Path) -> Path:
        return tmp_path / "keys" / "vault.json"

    @pytest.fixture
    def vault(self, path: Path) -> KeyVault:
        return LocalKeyFileVault(path)

    @pytest.fixture
    def other_vault(self, tmp_path: Path) -> KeyVault:
        return LocalKeyFileVault(tmp_path / "other" / "vault.json")

    @staticmethod
    def materials(path: Path, key_id: str) -> list[bytes]:
        body = json.loads(path.read_bytes())
        return [base64.b64decode(m) for m in body["keys"][key_id].values()]

    def test_file_mode_is_0600(self, vault: KeyVault, path: Path) -> None:
        vault.data_key("tenant-a")
        vault.rotate("tenant-a")
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        # no temp files left; the lock file processes sharing the key file take
        assert sorted(p.name for p in path.parent.iterdir()) == ["vault.json", "vault.json.lock"]

    def test_reopen_keeps_keys(self, vault: KeyVault, path: Path) -> None:
        plain_1, wrapped_1, _ = vault.data_key("tenant-a")
        vault.rotate("tenant-a")
        plain_2, wrapped_2, _ = vault.data_key("tenant-a")
        vault.data_key("tenant-b")
        vault.destroy("tenant-b")
        reopened = LocalKeyFileVault(path)
        assert reopened.unwrap("tenant-a", wrapped_1) == plain_1
        assert reopened.unwrap("tenant-a", wrapped_2) == plain_2
        assert reopened.data_key("tenant-a")[2] == 2
        with pytest.raises(KeyDestroyed):
            reopened.data_key("tenant-b")

    def test_two_processes_sharing_the_file_lose_no_version(
        self, vault: KeyVault, path: Path
    ) -> None:
        """`mnemo keys rotate --data-dir` beside a running server: each held the file as it
        had read it, so the second rotation wrote its own version 2 over the first one's,
        and what the first sealed under its version 2 no longer opened."""
        vault.data_key("tenant-a")
        other = LocalKeyFileVault(path)  # another process, which read the file just now
        assert vault.rotate("tenant-a") == 2
        plain, wrapped, version = vault.data_key("tenant-a")
        assert version == 2
        # the other one reads the rotation: it seals under version 2, and opens it (it once
        # sealed under version 1 and answered BAD_WRAPPED_KEY for version 2)
        assert other.unwrap("tenant-a", wrapped) == plain
        assert other.data_key("tenant-a")[2] == 2
        assert other.rotate("tenant-a") == 3  # not a second version 2
        assert other.unwrap("tenant-a", wrapped) == plain
        assert LocalKeyFileVault(path).unwrap("tenant-a", wrapped) == plain
        other.destroy("tenant-a")
        with pytest.raises(KeyDestroyed):
            vault.data_key("tenant-a")  # destroyed by the other process: read so at once
        with pytest.raises(KeyDestroyed):
            vault.unwrap("tenant-a", wrapped)
        with pytest.raises(KeyDestroyed):
            vault.rotate("tenant-a")

    def test_destroy_removes_material_from_file(self, vault: KeyVault, path: Path) -> None:
        vault.data_key("tenant-a")
        vault.rotate("tenant-a")
        vault.data_key("tenant-b")
        doomed = self.materials(path, "tenant-a")
        kept = self.materials(path, "tenant-b")
        before = path.read_bytes()
        assert len(doomed) == 2
        for material in doomed:
            assert base64.b64encode(material) in before

        vault.destroy("tenant-a")

        after = path.read_bytes()
        for material in doomed:
            assert base64.b64encode(material) not in after
            assert material not in after
        assert self.materials(path, "tenant-b") == kept

    def test_warns_development_only_without_key_material(
        self, path: Path, caplog: pytest.LogCaptureFixture
    ) -> None:
        with caplog.at_level(logging.WARNING, logger="mnemo.keyvault"):
            vault = LocalKeyFileVault(path)
            plaintext, _, _ = vault.data_key("tenant-a")
            LocalKeyFileVault(path)
        messages = [r.getMessage() for r in caplog.records if r.name == "mnemo.keyvault"]
        assert any("development only" in m for m in messages)
        (material,) = self.materials(path, "tenant-a")
        encoded = base64.b64encode(material).decode()
        for message in messages:
            assert encoded not in message
            assert plaintext.hex() not in message
        assert encoded not in repr(vault)

    def test_loose_mode_is_tightened(self, path: Path) -> None:
        LocalKeyFileVault(path).data_key("tenant-a")
        path.chmod(0o644)
        LocalKeyFileVault(path)
        assert stat.S_IMODE(path.stat().st_mode) == 0o600

    def test_corrupt_file_is_refused(self, path: Path) -> None:
        path.parent.mkdir(parents=True)
        path.write_text("{not json")
        with pytest.raises(ValueError, match="not a valid Mnemo key file"):
            LocalKeyFileVault(path)

    def test_failed_write_changes_nothing(
        self, vault: LocalKeyFileVault, path: Path, monkeypatch: pytest.MonkeyPatch
    ) -> None:
        plaintext, wrapped, _ = vault.data_key("tenant-a")
        before = path.read_bytes()

        def broken(state: object) -> None:
            raise OSError("disk full")

        monkeypatch.setattr(vault, "_persist", broken)
        with pytest.raises(OSError, match="disk full"):
            vault.destroy("tenant-a")
        with pytest.raises(OSError, match="disk full"):
            vault.rotate("tenant-a")
        assert path.read_bytes() == before
        assert vault.unwrap("tenant-a", wrapped) == plaintext
        assert vault.data_key("tenant-a")[2] == 1
