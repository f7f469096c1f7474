"""The vault a deployment's keys are in is recorded at its first start, and a vault that
lost them (wiped, re-initialised, another one) is refused at a start and answered 503
while running, never read as if every key had been destroyed (mnemo.vault_identity).
The OpenBao side of the same is in tests/e2e/test_vault_outages.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from mnemo.adapters.memory_key_vault import InMemoryKeyVault
from mnemo.adapters.sqlite_access import SqliteAccessStore
from mnemo.domain.errors import InvalidInput, KeyDestroyed, Unavailable
from mnemo.ports import IDENTITY_KEY_ID, KeyVault
from mnemo.vault_identity import IdentityGuardedVault, VaultKeysMissing, check_vault_identity


@pytest.fixture
def access(tmp_path: Path) -> SqliteAccessStore:
    return SqliteAccessStore(tmp_path / "access.sqlite3", "NORMAL")


def started(vault: KeyVault, access: SqliteAccessStore, **options: Any) -> IdentityGuardedVault:
    """`vault` guarded, bound as a process's start binds it (recording its identity)."""
    guarded = IdentityGuardedVault(vault, **options)
    guarded.bind(check_vault_identity(vault, access, setting="vault_addr"))
    return guarded


def test_the_first_start_records_the_vault_and_later_starts_need_the_same(
    access: SqliteAccessStore,
) -> None:
    vault = InMemoryKeyVault()
    recorded = check_vault_identity(vault, access, setting="vault_addr")
    assert access.vault_identity() == recorded == vault.identity(create=False)
    assert check_vault_identity(vault, access, setting="vault_addr") == recorded

    wiped = InMemoryKeyVault()
    with pytest.raises(InvalidInput) as refused:
        check_vault_identity(wiped, access, setting="vault_addr")
    assert refused.value.code == "VAULT_KEY_MISSING"
    assert refused.value.field == "vault_addr"
    assert "MNEMO_VAULT_ADDR" in refused.value.message
    # nothing made in the vault that was refused, and the record kept
    assert not wiped.has_key(IDENTITY_KEY_ID)
    assert access.vault_identity() == recorded

    # a vault that made an identity of its own is refused as well
    other = InMemoryKeyVault()
    other.identity(create=True)
    with pytest.raises(InvalidInput):
        check_vault_identity(other, access, setting="key_file")


def test_a_destroyed_key_is_believed_only_in_the_recorded_vault(
    access: SqliteAccessStore,
) -> None:
    vault = InMemoryKeyVault()
    guarded = started(vault, access)
    _, wrapped, _ = guarded.data_key("acme/user:U1")
    guarded.destroy("acme/user:U1")
    with pytest.raises(KeyDestroyed):
        guarded.unwrap("acme/user:U1", wrapped)  # a forgotten user: forgotten
    assert guarded.is_destroyed("acme/user:U1")

    _, kept, _ = guarded.data_key("acme")
    guarded.inner = InMemoryKeyVault()  # the same address, now a wiped vault
    guarded.bind(access.vault_identity() or b"")  # no match reused from before
    for call in (
        lambda: guarded.unwrap("acme", kept),
        lambda: guarded.data_key("acme"),
        lambda: guarded.search_key("acme"),
        lambda: guarded.rotate("acme"),
        lambda: guarded.destroy("acme"),
    ):
        with pytest.raises(VaultKeysMissing) as answered:
            call()
        assert answered.value.code == "VAULT_KEY_MISSING"
    # no key was made in the wiped vault, the identity key included
    assert not guarded.inner.has_key("acme")
    assert not guarded.inner.has_key(IDENTITY_KEY_ID)


def test_a_match_is_reused_for_the_recheck_interval(access: SqliteAccessStore) -> None:
    vault = InMemoryKeyVault()
    now = [100.0]
    guarded = started(vault, access, recheck=10.0, now=lambda: now[0])
    _, wrapped, _ = guarded.data_key("acme")
    guarded.inner = InMemoryKeyVault()
    with pytest.raises(VaultKeysMissing):  # a key is never read as destroyed on a match
        guarded.unwrap("acme", wrapped)  # from before
    now[0] += 5
    guarded.bind(access.vault_identity() or b"")
    guarded.inner = vault
    guarded.data_key("acme")  # matched now
    guarded.inner = InMemoryKeyVault()
    guarded.data_key("acme")  # within the interval: that match stands
    with pytest.raises(VaultKeysMissing):  # a wrapped key the vault no longer takes
        guarded.unwrap("acme", wrapped)
    now[0] += 10.5
    with pytest.raises(VaultKeysMissing):
        guarded.data_key("acme")


def test_an_unbound_guard_passes_everything_through() -> None:
    vault = InMemoryKeyVault()
    guarded = IdentityGuardedVault(vault)
    _, wrapped, _ = guarded.data_key("acme")
    guarded.destroy("acme")
    with pytest.raises(KeyDestroyed):
        guarded.unwrap("acme", wrapped)
    assert not vault.has_key(IDENTITY_KEY_ID)


def test_a_vault_away_at_the_start_is_checked_before_its_first_use(
    access: SqliteAccessStore,
) -> None:
    vault = InMemoryKeyVault()
    recorded = check_vault_identity(vault, access, setting="vault_addr")

    wiped = IdentityGuardedVault(InMemoryKeyVault())
    wiped.attach(access, setting="vault_addr")
    for call in (lambda: wiped.data_key("acme"), lambda: wiped.has_key("acme")):
        with pytest.raises(VaultKeysMissing):
            call()
    assert not wiped.inner.has_key(IDENTITY_KEY_ID)

    same = IdentityGuardedVault(vault)
    same.attach(access, setting="vault_addr")
    same.data_key("acme")
    assert same.expected == recorded


def test_the_embedded_mode_starts_while_its_vault_is_away(tmp_path: Path) -> None:
    """A server on a data directory starts, as before, while the vault is down, and checks
    the vault once it answers; a distributed process waits for it at its start instead."""
    from tests.vault_support import SwitchableVault

    from mnemo.bootstrap import build_embedded
    from mnemo.settings import MnemoSettings

    settings = MnemoSettings(
        data_dir=tmp_path / "data", embedder="hashing", sqlite_synchronous="NORMAL"
    )
    vault = SwitchableVault()
    build_embedded(settings, vault=vault).close()  # records the vault's identity
    vault.down = True
    platform = build_embedded(settings, vault=vault)
    try:
        assert platform.sealer is not None
        keys = platform.sealer.keys
        with pytest.raises(Unavailable) as away:
            keys.data_key("acme")
        assert away.value.code == "VAULT_UNAVAILABLE"
        vault.down = False
        wrapped = keys.data_key("acme")[1]  # checked now, and the same vault
        vault.inner = InMemoryKeyVault()  # wiped while the server runs
        with pytest.raises(VaultKeysMissing):
            keys.unwrap("acme", wrapped)
    finally:
        platform.close()


def test_once_the_vault_is_found_wrong_no_call_goes_on_with_an_earlier_match(
    access: SqliteAccessStore,
) -> None:
    vault = InMemoryKeyVault()
    now = [100.0]
    guarded = started(vault, access, recheck=60.0, now=lambda: now[0])
    _, wrapped, _ = guarded.data_key("acme")  # a match, good for 60 s
    guarded.inner = InMemoryKeyVault()
    with pytest.raises(VaultKeysMissing):
        guarded.unwrap("acme", wrapped)
    for call in (
        lambda: guarded.data_key("acme/user:U1"),
        lambda: guarded.search_key("acme/user:U1"),
        lambda: guarded.rotate("acme/user:U1"),
    ):
        with pytest.raises(VaultKeysMissing):
            call()
    assert not guarded.inner.has_key("acme/user:U1")  # nothing made in the wrong vault


def test_a_forget_asks_the_vault_then_and_there(access: SqliteAccessStore) -> None:
    vault = InMemoryKeyVault()
    guarded = started(vault, access, recheck=60.0)
    guarded.data_key("acme/user:U1")  # a match, good for 60 s
    wiped = InMemoryKeyVault()
    guarded.inner = wiped
    with pytest.raises(VaultKeysMissing):
        guarded.destroy("acme/user:U1")
    assert not wiped.is_destroyed("acme/user:U1")  # no tombstone left in the wrong vault


class Counting(InMemoryKeyVault):
    def __init__(self) -> None:
        super().__init__()
        self.asked = 0

    def identity(self, *, create: bool) -> bytes | None:
        self.asked += 1
        return super().identity(create=create)


def test_a_key_shredded_in_the_recorded_vault_is_not_asked_about_again(
    access: SqliteAccessStore,
) -> None:
    vault = Counting()
    guarded = started(vault, access)
    _, wrapped, _ = guarded.data_key("acme/user:U1")
    guarded.destroy("acme/user:U1")
    asked = vault.asked
    for _ in range(5):
        with pytest.raises(KeyDestroyed):
            guarded.unwrap("acme/user:U1", wrapped)
        assert guarded.is_destroyed("acme/user:U1")
    assert vault.asked == asked + 1  # once, for the first read: the tombstone is for good
