"""The Vault token from a file (MNEMO_VAULT_TOKEN_FILE), on a real OpenBao: when Vault
Agent replaces the token and the old one is revoked, the running vault adapter goes on with
the new one, without a restart.

Tokens A and B are real child tokens with a policy of their own (transit and the mount
list only), made through OpenBao's token API with the server's root token."""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import hvac
import pytest
from hvac import exceptions as vault_errors
from pydantic import SecretStr
from tests.support import missing
from tests.vault_support import vault_settings

from mnemo.bootstrap import check_vault_token, make_key_vault
from mnemo.domain.errors import InvalidInput, Unavailable
from mnemo.settings import MnemoSettings

POLICY = """
path "sys/mounts" { capabilities = ["read"] }
path "transit/*" { capabilities = ["create", "read", "update", "delete", "list"] }
"""


@dataclass
class Tokens:
    url: str
    root: hvac.Client
    policy: str
    made: list[str]

    def new(self) -> str:
        answer = self.root.auth.token.create(policies=[self.policy], ttl="15m", no_parent=False)
        token = str(answer["auth"]["client_token"])
        self.made.append(token)
        return token

    def revoke(self, token: str) -> None:
        self.root.auth.token.revoke(token)
        with pytest.raises((vault_errors.Forbidden, vault_errors.Unauthorized)):
            hvac.Client(url=self.url, token=token, timeout=3).auth.token.lookup_self()


@pytest.fixture
def tokens() -> Iterator[Tokens]:
    url, root_token = vault_settings()
    if root_token is None:
        missing("OpenBao", "no MNEMO_VAULT_TOKEN and no var/run/services.env")
    root = hvac.Client(url=url, token=root_token, timeout=5)
    try:
        mounts = root.sys.list_mounted_secrets_engines()
    except Exception as exc:  # unreachable, sealed or refused: the service is not usable
        missing("OpenBao", f"{url}: {type(exc).__name__}")
    if "transit/" not in mounts.get("data", mounts):
        root.sys.enable_secrets_engine("transit", path="transit")
    policy = f"mnemo-token-file-{uuid.uuid4().hex[:10]}"
    root.sys.create_or_update_policy(name=policy, policy=POLICY)
    made = Tokens(url, root, policy, [])
    try:
        yield made
    finally:
        for token in made.made:
            with contextlib.suppress(vault_errors.VaultError):
                root.auth.token.revoke(token)
        root.sys.delete_policy(name=policy)


def write_token(path: Path, token: str) -> None:
    """As Vault Agent's file sink does: a new file renamed over the old one."""
    fresh = path.with_name(f".{path.name}.new")
    fresh.write_text(token + "\n", encoding="utf-8")
    os.replace(fresh, path)


def settings_for(tokens: Tokens, token_file: Path) -> MnemoSettings:
    return MnemoSettings(
        data_dir=token_file.parent / "data",
        vault_addr=tokens.url,
        vault_token_file=token_file,
        vault_key_prefix=f"tf{uuid.uuid4().hex[:10]}",
    )


def test_a_replaced_token_is_used_after_the_old_one_is_revoked(
    tokens: Tokens, tmp_path: Path
) -> None:
    token_a, token_b = tokens.new(), tokens.new()
    token_file = tmp_path / "token"
    write_token(token_file, token_a)
    vault = make_key_vault(settings_for(tokens, token_file))
    plaintext, wrapped, _ = vault.data_key("tenant-a")

    write_token(token_file, token_b)  # the agent renewed: a new token in the file...
    tokens.revoke(token_a)  # ...and the old one is gone

    assert vault.unwrap("tenant-a", wrapped) == plaintext
    fresh, wrapped_b, _ = vault.data_key("tenant-a")
    assert vault.unwrap("tenant-a", wrapped_b) == fresh
    assert vault.rotate("tenant-a") == 2


def test_a_refused_call_is_retried_once_the_file_holds_a_valid_token(
    tokens: Tokens, tmp_path: Path
) -> None:
    token_a, token_b = tokens.new(), tokens.new()
    token_file = tmp_path / "token"
    write_token(token_file, token_a)
    vault = make_key_vault(settings_for(tokens, token_file))
    plaintext, wrapped, _ = vault.data_key("tenant-a")

    tokens.revoke(token_a)  # revoked before the agent wrote the next one
    with pytest.raises(Unavailable) as refused:
        vault.unwrap("tenant-a", wrapped)
    assert refused.value.code == "VAULT_UNAVAILABLE"  # answered 503, never 500
    assert token_a not in str(refused.value)

    token_file.write_text(token_b, encoding="utf-8")  # rewritten in place this time
    assert vault.unwrap("tenant-a", wrapped) == plaintext


def test_the_token_file_must_hold_a_token_at_start(tmp_path: Path) -> None:
    settings = MnemoSettings(
        data_dir=tmp_path, vault_addr="http://127.0.0.1:9", vault_token_file=tmp_path / "none"
    )
    with pytest.raises(InvalidInput) as absent:
        make_key_vault(settings)
    assert (absent.value.code, absent.value.field) == ("VAULT_TOKEN_MISSING", "vault_token_file")
    (tmp_path / "empty").write_text("\n", encoding="utf-8")
    with pytest.raises(InvalidInput) as empty:
        make_key_vault(settings.model_copy(update={"vault_token_file": tmp_path / "empty"}))
    assert empty.value.code == "VAULT_TOKEN_MISSING"


def test_a_token_and_a_token_file_together_are_refused(tmp_path: Path) -> None:
    (tmp_path / "token").write_text("s.file-token", encoding="utf-8")
    settings = MnemoSettings(
        data_dir=tmp_path,
        vault_addr="http://127.0.0.1:9",
        vault_token="s.env-token",
        vault_token_file=tmp_path / "token",
    )
    with pytest.raises(InvalidInput) as both:
        make_key_vault(settings)
    assert both.value.code == "VAULT_TOKEN_AMBIGUOUS"
    assert "s.env-token" not in str(both.value)
    assert "s.file-token" not in str(both.value)


def test_a_token_the_vault_refuses_stops_the_start_by_its_setting(
    tokens: Tokens, tmp_path: Path
) -> None:
    """A token the vault refuses (revoked, mistyped, of another vault) is a configuration
    error at the start: before, a worker started on it, joined its group, took partitions
    from healthy replicas and answered /readyz 200 until records came, and then retried
    them for ever as VAULT_UNAVAILABLE."""
    revoked = tokens.new()
    tokens.revoke(revoked)
    token_file = tmp_path / "token"
    write_token(token_file, revoked)
    by_file = settings_for(tokens, token_file)
    by_value = by_file.model_copy(
        update={"vault_token_file": None, "vault_token": SecretStr(revoked)}
    )
    for settings, setting in ((by_file, "vault_token_file"), (by_value, "vault_token")):
        with pytest.raises(InvalidInput) as refused:
            check_vault_token(settings)
        assert (refused.value.code, refused.value.field) == ("VAULT_TOKEN_REFUSED", setting)
        assert f"MNEMO_{setting.upper()}" in refused.value.message
        assert revoked not in refused.value.message
    # a token the vault takes passes, and one the file renews in time is taken
    check_vault_token(
        by_file.model_copy(
            update={"vault_token_file": None, "vault_token": SecretStr(tokens.new())}
        )
    )
    write_token(token_file, tokens.new())
    check_vault_token(by_file)


def test_an_unreachable_vault_at_the_start_is_waited_for_not_refused(tmp_path: Path) -> None:
    settings = MnemoSettings(
        data_dir=tmp_path,
        vault_addr="http://127.0.0.1:9",
        vault_token="s.anything",
        vault_timeout=0.5,
    )
    with pytest.raises(Unavailable) as away:
        check_vault_token(settings)
    assert away.value.code == "VAULT_UNAVAILABLE"
