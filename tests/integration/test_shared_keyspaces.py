"""A process pointed at a live deployment's keyspace for tenants and keys, signed audit
checkpoints or documents' bytes (`MNEMO_ACCESS_KEYSPACE`, `MNEMO_AUDIT_CHECKPOINT_KEYSPACE`,
`MNEMO_DOCUMENT_BLOB_KEYSPACE`, as a rebuild is run) never creates nor migrates it. A name
that is wrong, or a keyspace that lacks migrations, stops the start as a configuration
error naming the setting, not with the driver's error on the first request."""

from __future__ import annotations

import shutil
import uuid
from pathlib import Path

import pytest
from tests.distributed_support import (
    CASSANDRA_HOSTS,
    CASSANDRA_PORT,
    KAFKA,
    distributed_settings,
    require_services,
)
from tests.support import refused_start

from mnemo.adapters.cassandra_store import MIGRATIONS_DIR, migrate, pending_migrations
from mnemo.bootstrap import build_distributed, connect_store
from mnemo.domain.errors import InvalidInput

SHARED = ("access_keyspace", "audit_checkpoint_keyspace", "document_blob_keyspace")


@pytest.mark.parametrize("setting", SHARED)
def test_a_keyspace_that_does_not_exist_stops_the_start_naming_the_setting(
    tmp_path: Path, setting: str
) -> None:
    require_services()
    typo = f"mnemo_nosuch_{uuid.uuid4().hex[:8]}"
    settings = distributed_settings(tmp_path / "data", **{setting: typo})
    try:
        with pytest.raises(InvalidInput) as refused:
            build_distributed(settings, "test", with_index=False)
        assert (refused.value.code, refused.value.field) == ("KEYSPACE_NOT_MIGRATED", setting)
        assert f"MNEMO_{setting.upper()}" in refused.value.message
        assert typo in refused.value.message
    finally:
        store = connect_store(settings)
        try:
            assert typo not in store.session.cluster.metadata.keyspaces  # not created
            store.session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra_keyspace}")
        finally:
            store.close()


def test_a_keyspace_without_the_newest_migrations_is_named_with_them(tmp_path: Path) -> None:
    require_services()
    settings = distributed_settings(tmp_path / "data")
    older = f"mnemo_older_{uuid.uuid4().hex[:8]}"
    files = sorted(MIGRATIONS_DIR.glob("*.cql"))
    folder = tmp_path / "cql"
    folder.mkdir()
    for path in files[:-1]:  # all but the newest migration, as before an upgrade
        shutil.copy(path, folder / path.name)
    newest = int(files[-1].name.split("_", 1)[0])
    store = connect_store(settings)
    try:
        store.session.execute(
            f"CREATE KEYSPACE {older} WITH replication = "
            "{'class': 'SimpleStrategy', 'replication_factor': 1}",
            timeout=120,
        )
        migrate(store.session, older, folder)
        assert pending_migrations(store.session, older) == [newest]
        with pytest.raises(InvalidInput) as refused:
            build_distributed(
                settings.model_copy(update={"access_keyspace": older}), "test", with_index=False
            )
        assert refused.value.code == "KEYSPACE_NOT_MIGRATED"
        assert f"lacks migrations [{newest}]" in refused.value.message
        migrate(store.session, older)
        assert pending_migrations(store.session, older) == []
        build_distributed(
            settings.model_copy(update={"access_keyspace": older}), "test", with_index=False
        ).close()
    finally:
        for ks in (older, settings.cassandra_keyspace):
            store.session.execute(f"DROP KEYSPACE IF EXISTS {ks}", timeout=120)
        store.close()


def test_a_consumer_process_stops_with_exit_status_78(tmp_path: Path) -> None:
    """`python -m mnemo_registrar` as the chart starts it: exit status 78, the setting's
    name and the code, no traceback."""
    require_services()
    settings = distributed_settings(tmp_path / "data")
    assert settings.vault_addr is not None
    assert settings.vault_token is not None
    typo = f"mnemo_nosuch_{uuid.uuid4().hex[:8]}"
    env = {
        "PATH": "/usr/bin:/bin",
        "MNEMO_DATA_DIR": str(tmp_path / "data"),
        "MNEMO_MODE": "distributed",
        "MNEMO_EMBEDDER": "hashing",
        "MNEMO_KAFKA_BOOTSTRAP": KAFKA,
        "MNEMO_KAFKA_TOPIC": settings.kafka_topic,
        "MNEMO_CASSANDRA_HOSTS": ",".join(CASSANDRA_HOSTS)
        if isinstance(CASSANDRA_HOSTS, list | tuple)
        else str(CASSANDRA_HOSTS),
        "MNEMO_CASSANDRA_PORT": str(CASSANDRA_PORT),
        "MNEMO_CASSANDRA_KEYSPACE": settings.cassandra_keyspace,
        "MNEMO_VAULT_ADDR": settings.vault_addr,
        "MNEMO_VAULT_TOKEN": settings.vault_token.get_secret_value(),
        "MNEMO_VAULT_KEY_PREFIX": settings.vault_key_prefix,
        "MNEMO_ACCESS_KEYSPACE": typo,
    }
    try:
        output = refused_start("mnemo_registrar", env=env, timeout=180)
        assert "KEYSPACE_NOT_MIGRATED" in output
        assert "MNEMO_ACCESS_KEYSPACE" in output
        assert settings.vault_token.get_secret_value() not in output
    finally:
        store = connect_store(settings)
        try:
            store.session.execute(f"DROP KEYSPACE IF EXISTS {settings.cassandra_keyspace}")
        finally:
            store.close()
