"""Every MNEMO_* variable is a setting something reads, and any other one stops a start.

The repository is scanned for MNEMO_* names (code, docs, chart, Makefile), so a name used
anywhere without being declared fails here; each settings field must be read by code."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from tests.support import refused_start, stack_module

from mnemo.domain.errors import InvalidInput
from mnemo.entrypoints.cli import cli
from mnemo.handlers import registry
from mnemo.settings import (
    CLIENT_VARIABLES,
    CONSUMERS,
    GatewaySettings,
    MnemoSettings,
    UnknownSetting,
    WorkerSettings,
    check_client_values,
    check_embedded_environment,
    check_environment,
    check_setting_values,
    declared_environment,
    known_variables,
    render_settings_doc,
    setting_variables,
)

REPO = Path(__file__).resolve().parents[2]
NAME = re.compile(r"MNEMO_[A-Z0-9_]+")
TYPO = "MNEMO_KAFKA_BOOTSTRAPS"
# the path a burst gives way to has no give-way settings of its own
NEVER_GIVE_WAY = ("MNEMO_REGISTRAR_GIVE_WAY_SECONDS", "MNEMO_INDEXER_GIVE_WAY_BACKLOG")
# names the docs and these tests show being refused (each is checked to be refused)
MISSPELT = {TYPO, "MNEMO_GATEWAY_PROT", "MNEMO_REGISTRAR_KAFKA_BOOTSTRAP", *NEVER_GIVE_WAY}
# MNEMO_* words that are not variables: the base error code, and the misspelt examples
NOT_VARIABLES = {"MNEMO_ERROR", *MISSPELT}


def repository_names() -> dict[str, set[str]]:
    """Each MNEMO_* name in the tracked files, with the files naming it."""
    listed = subprocess.run(
        ["git", "ls-files"], cwd=REPO, capture_output=True, text=True, check=True
    ).stdout.split()
    found: dict[str, set[str]] = {}
    for path in listed:
        file = REPO / path
        if not file.is_file() or file.suffix in {".zip", ".png", ".gz"}:
            continue
        try:
            text = file.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            continue
        for name in NAME.findall(text):
            # a prefix quoted on its own (MNEMO_REGISTRAR_) or the head of a pattern
            if not name.endswith("_") and name not in NOT_VARIABLES:
                found.setdefault(name, set()).add(path)
    return found


def test_every_mnemo_name_in_the_repository_is_known() -> None:
    names = repository_names()
    assert len(names) > 60  # the scan did find the settings
    known = known_variables()
    unknown = {
        n: sorted(files)
        for n, files in names.items()
        # a prefix named on its own (MNEMO_QDRANT for every MNEMO_QDRANT_* name) is no variable
        if n not in known and not any(k.startswith(f"{n}_") for k in known)
    }
    assert unknown == {}, "declare these in a settings model or an infra ENVIRONMENT table"


@pytest.mark.parametrize("name", sorted(MISSPELT))
def test_the_misspelt_examples_are_refused(name: str) -> None:
    with pytest.raises(UnknownSetting):
        check_environment({name: "x"})


def test_an_unknown_variable_is_refused_by_name_without_its_value() -> None:
    with pytest.raises(UnknownSetting) as refused:
        check_environment({"MNEMO_MODE": "embedded", TYPO: "s3cret-host:9092", "PATH": "/bin"})
    assert refused.value.code == "UNKNOWN_SETTING"
    assert refused.value.field == TYPO
    assert TYPO in refused.value.message
    assert "MNEMO_KAFKA_BOOTSTRAP?" in refused.value.message  # the closest known name
    assert "s3cret" not in str(refused.value)


def test_known_variables_pass_whatever_their_case_and_other_prefixes_are_ignored() -> None:
    check_environment(
        {
            "MNEMO_MODE": "distributed",
            "mnemo_data_dir": "/tmp/x",  # the settings read names without case
            "MNEMO_INDEXER_BATCH_SIZE": "8",
            "MNEMO_LOG_LEVEL": "warning",
            "MNEMO_REGISTRAR_LOG_LEVEL": "DEBUG",
            "MNEMO_GATEWAY_PORT": "8080",
            "MNEMO_API_KEY": "k",
            "OTEL_SERVICE_NAME": "x",
            "VAULT_CACERT": "/ca.pem",
            "MNEMOSYNE": "not our prefix",
        }
    )
    with pytest.raises(UnknownSetting):
        check_environment({"MNEMO_GATEWAY_PROT": "8080"})
    with pytest.raises(UnknownSetting):  # a consumer prefix takes only WorkerSettings' fields
        check_environment({"MNEMO_REGISTRAR_KAFKA_BOOTSTRAP": "x"})


def test_one_setting_set_twice_in_different_cases_is_refused_by_name() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_environment({"MNEMO_GATEWAY_PORT": "18492", "mnemo_gateway_port": "18493"})
    assert refused.value.code == "SETTING_SET_TWICE"
    assert "MNEMO_GATEWAY_PORT" in refused.value.message
    assert "mnemo_gateway_port" in refused.value.message
    assert "1849" not in str(refused.value)
    with pytest.raises(InvalidInput):
        check_environment({"MNEMO_DATA_DIR": "/a", "Mnemo_Data_Dir": "/b"})


def test_the_worker_prefixes_are_the_consumers() -> None:
    assert CONSUMERS == registry.NAMES
    for consumer in CONSUMERS:
        gives_way = registry.consumer(consumer).gives_way
        for field in WorkerSettings.model_fields:
            known = f"MNEMO_{consumer}_{field}".upper() in setting_variables()
            # how long a consumer gives way is a setting of the consumers that give way
            assert known == (gives_way or not field.startswith("give_way")), (consumer, field)


@pytest.mark.parametrize("name", NEVER_GIVE_WAY)
def test_a_give_way_setting_of_a_consumer_that_never_gives_way_is_refused(name: str) -> None:
    """The registrar and the indexer are the path a burst gives way to: such a setting
    would be read by nothing."""
    with pytest.raises(UnknownSetting):
        check_environment({name: "3"})
    check_environment({"MNEMO_AUDIT_GIVE_WAY_SECONDS": "3", "MNEMO_DECAY_GIVE_WAY_BACKLOG": "9"})


@pytest.mark.parametrize("name", ["mnemo_url", "Mnemo_Api_Key", "mnemo_admin_token"])
def test_a_client_variable_not_in_capitals_is_refused(name: str) -> None:
    """The client commands read their variables by the exact name, unlike the settings
    models: `mnemo_url` would leave the client on its default server."""
    with pytest.raises(InvalidInput) as refused:
        check_environment({name: "http://127.0.0.1:9"})
    assert refused.value.code == "SETTING_NOT_IN_CAPITALS"
    assert name in refused.value.message
    assert name.upper() in refused.value.message
    assert "127.0.0.1:9" not in str(refused.value)
    check_environment({"mnemo_gateway_port": "8080"})  # a settings model reads any case


def test_a_secret_that_is_too_short_is_refused_without_its_length() -> None:
    for pepper in ("short", "a-12-letters"):
        with pytest.raises(InvalidInput) as refused:
            check_setting_values({"MNEMO_KEY_PEPPER": pepper})
        assert refused.value.code == "INVALID_SETTING"
        assert "16" in refused.value.message  # what it takes
        assert str(len(pepper)) not in refused.value.message.replace("16", "")


def test_an_empty_vault_token_is_refused() -> None:
    with pytest.raises(InvalidInput) as refused:
        check_setting_values({"MNEMO_VAULT_TOKEN": ""})
    assert refused.value.code == "INVALID_SETTING"
    assert refused.value.field == "MNEMO_VAULT_TOKEN"


@pytest.mark.parametrize("token", ["", "   ", "\n", "op-token", "  0123456789abcde  "])
def test_an_empty_or_short_operator_token_stops_the_start_by_name(token: str) -> None:
    """An empty Secret key gave every caller sending an empty header the operator's
    rights (an empty token compares equal to an empty header)."""
    with pytest.raises(InvalidInput) as refused:
        check_setting_values({"MNEMO_GATEWAY_ADMIN_TOKEN": token})
    assert (refused.value.code, refused.value.field) == (
        "INVALID_SETTING",
        "MNEMO_GATEWAY_ADMIN_TOKEN",
    )
    assert "16" in refused.value.message


def test_secrets_lose_the_white_space_a_secret_file_adds() -> None:
    """`echo $TOKEN > file` ends the value in a newline, which no HTTP header may carry:
    the vault refused every call as unreachable, twenty times, then the process died."""
    check_setting_values({"MNEMO_GATEWAY_ADMIN_TOKEN": "0123456789abcdef\n"})
    gateway = GatewaySettings(admin_token="  0123456789abcdef\n")
    assert gateway.admin_token is not None
    assert gateway.admin_token.get_secret_value() == "0123456789abcdef"
    vault = MnemoSettings(vault_token="s.token-of-the-vault\n")
    assert vault.vault_token is not None
    assert vault.vault_token.get_secret_value() == "s.token-of-the-vault"


def test_a_main_keyspace_too_long_for_tenant_keyspaces_stops_the_start() -> None:
    """A tenant's own keyspace is named after the main one; past 48 characters Cassandra
    has no such name, and every request of that tenant failed with a 500."""
    long = "k" * 30
    with pytest.raises(InvalidInput) as refused:
        check_setting_values(
            {
                "MNEMO_CASSANDRA_KEYSPACE": long,
                "MNEMO_CASSANDRA_TENANT_KEYSPACES": "acme,a-tenant-with-a-long-name",
            }
        )
    assert refused.value.field == "MNEMO_CASSANDRA_TENANT_KEYSPACES"
    assert "MNEMO_CASSANDRA_KEYSPACE" in refused.value.message
    check_setting_values({"MNEMO_CASSANDRA_KEYSPACE": long})  # no tenant of its own: fine
    check_setting_values(
        {"MNEMO_CASSANDRA_KEYSPACE": "k" * 29, "MNEMO_CASSANDRA_TENANT_KEYSPACES": "acme"}
    )
    # a name that fits whole needs no room for the hash: `{keyspace}_t_acme` is 42 long
    check_setting_values(
        {"MNEMO_CASSANDRA_KEYSPACE": "k" * 35, "MNEMO_CASSANDRA_TENANT_KEYSPACES": "acme"}
    )
    with pytest.raises(InvalidInput):  # a tenant with a hyphen is always hashed: 54 long
        check_setting_values(
            {"MNEMO_CASSANDRA_KEYSPACE": "k" * 35, "MNEMO_CASSANDRA_TENANT_KEYSPACES": "ac-me"}
        )


def test_the_embedded_server_refuses_a_consumers_own_variable() -> None:
    """The embedded server runs every consumer with the shared settings: a consumer's own
    variable would be read by nothing there."""
    with pytest.raises(InvalidInput) as refused:
        check_embedded_environment({"MNEMO_BATCH_SIZE": "64", "MNEMO_INDEXER_BATCH_SIZE": "7"})
    assert refused.value.code == "SETTING_NOT_READ_HERE"
    assert "MNEMO_INDEXER_BATCH_SIZE" in refused.value.message
    assert "MNEMO_BATCH_SIZE" in refused.value.message
    check_embedded_environment({"MNEMO_BATCH_SIZE": "64", "MNEMO_LOG_LEVEL": "INFO"})


def test_mnemo_serve_does_not_start_with_a_consumers_own_variable(tmp_path: Path) -> None:
    env = {
        "PATH": "/usr/bin:/bin",
        "MNEMO_DATA_DIR": str(tmp_path / "data"),
        "MNEMO_REGISTRAR_EMBED_BATCH": "3",
    }
    output = refused_start("mnemo", "serve", "--port", "1", env=env, timeout=120)
    assert "SETTING_NOT_READ_HERE" in output
    assert "MNEMO_REGISTRAR_EMBED_BATCH" in output
    assert not (tmp_path / "data").exists()  # nothing was built


def test_the_client_variables_are_the_cli_options() -> None:
    envvars = {p.envvar for p in cli.params if getattr(p, "envvar", None)}
    assert envvars == set(CLIENT_VARIABLES)
    mcp = (REPO / "shared" / "mnemo" / "entrypoints" / "mcp_server.py").read_text(encoding="utf-8")
    assert set(NAME.findall(mcp)) <= set(CLIENT_VARIABLES)


def test_every_setting_is_read_by_code() -> None:
    """A field that nothing reads is a setting the chart or docs could name in vain."""
    sources = [
        p
        for root in ("shared", "services")
        for p in (REPO / root).rglob("*.py")
        if p.name != "settings.py"
    ]
    code = "\n".join(p.read_text(encoding="utf-8") for p in sources)
    for model in (MnemoSettings, GatewaySettings, WorkerSettings):
        for field in model.model_fields:
            assert re.search(rf"\.{field}\b", code), f"{model.__name__}.{field} is never read"


INFRA = ("services.py", "stack.py", "helm.py")


def infra_declared() -> dict[str, str]:
    declared: dict[str, str] = {}
    for script in INFRA:
        declared.update(declared_environment(REPO / "infra" / script))
    return declared


@pytest.mark.parametrize("script", INFRA)
def test_each_infra_script_declares_every_variable_it_names(script: str) -> None:
    """A script names its own variables in its ENVIRONMENT table; it may name another
    script's (stack.py keeps services.py's from Mnemo's processes)."""
    path = REPO / "infra" / script
    assert declared_environment(path), f"{script} has no ENVIRONMENT table"
    # Mnemo's own settings (passed on) and the client's variables (in hints) are known anyway
    named = {n for n in NAME.findall(path.read_text(encoding="utf-8")) if not n.endswith("_")}
    own = named - set(setting_variables()) - set(CLIENT_VARIABLES)
    assert own <= set(infra_declared()), sorted(own - set(infra_declared()))
    assert set(infra_declared()) <= set(known_variables())


def test_the_stack_keeps_exactly_the_infra_only_variables_from_mnemo_processes() -> None:
    """What stack.py strips from its components' environment is what only the infra scripts
    read: nothing a Mnemo process reads, nothing an infra script reads forgotten."""
    stack = stack_module()
    infra_only = set(infra_declared()) - set(setting_variables()) - {stack.TAG}
    infra_only -= set(declared_environment(REPO / "infra" / "helm.py"))
    assert set(stack.INFRA_ONLY) == infra_only


def test_the_settings_table_in_the_docs_is_generated_from_the_models() -> None:
    doc = REPO / "docs" / "settings.md"
    current = doc.read_text(encoding="utf-8")
    assert render_settings_doc(current) == current, "run `make settings-doc`"
    for name in setting_variables():
        if not any(name.startswith(f"MNEMO_{c.upper()}_") for c in CONSUMERS):
            assert f"`{name}`" in current


@pytest.mark.parametrize(
    "command",
    [
        ["-m", "mnemo_gateway"],
        ["-m", "mnemo_registrar"],
        ["-m", "mnemo_indexer"],
        ["-m", "mnemo", "status"],
    ],
    ids=["gateway", "registrar", "indexer", "cli"],
)
def test_a_process_does_not_start_with_a_misspelt_setting(
    command: list[str], tmp_path: Path
) -> None:
    env = {"PATH": "/usr/bin:/bin", "MNEMO_DATA_DIR": str(tmp_path), TYPO: "kafka:9092"}
    if "PYTHONPATH" in os.environ:  # the checkout's own modules, where the caller named them
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, *command], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 78, done.stderr  # EX_CONFIG, like every configuration error
    assert "UNKNOWN_SETTING" in done.stderr
    assert TYPO in done.stderr
    assert "kafka:9092" not in done.stderr + done.stdout
    assert not any(tmp_path.iterdir())  # nothing was started or written


@pytest.mark.parametrize(
    "command", [["-m", "mnemo_registrar"], ["-m", "mnemo", "status"]], ids=["registrar", "cli"]
)
def test_a_process_does_not_start_with_one_setting_set_twice(
    command: list[str], tmp_path: Path
) -> None:
    env = {"PATH": "/usr/bin:/bin", "MNEMO_DATA_DIR": str(tmp_path), "mnemo_data_dir": "/elsewhere"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, *command], env=env, capture_output=True, text=True, timeout=120
    )
    assert done.returncode == 78, done.stderr
    assert "SETTING_SET_TWICE" in done.stderr
    assert "/elsewhere" not in done.stderr + done.stdout


def test_with_json_a_configuration_error_is_one_json_object(tmp_path: Path) -> None:
    env = {"PATH": "/usr/bin:/bin", "MNEMO_DATA_DIR": str(tmp_path), TYPO: "kafka:9092"}
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, "-m", "mnemo", "--json", "status"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 78, done.stderr
    error = json.loads(done.stderr)["error"]
    assert error["code"] == "UNKNOWN_SETTING"
    assert TYPO in error["message"]
    assert error["exit_code"] == 78
    assert "kafka:9092" not in done.stderr


# a value that would be a secret if an operator pasted it into the wrong setting
PASTED = "s3cret-paste-0451"


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("MNEMO_CASSANDRA_PORT", "-5"),
        ("MNEMO_GATEWAY_PORT", "0"),
        ("MNEMO_GATEWAY_MAX_TAILS_PER_TENANT", "0"),
        ("MNEMO_GATEWAY_MAX_TAILS_PER_KEY", "many"),
        ("MNEMO_REGISTRAR_HEALTH_PORT", "abc"),
        ("MNEMO_LOG_FORMAT", "yaml"),
        ("MNEMO_KAFKA_SESSION_TIMEOUT", PASTED),
        ("mnemo_batch_size", "-1"),
        # a level logging or uvicorn does not know would stop the start later, unnamed
        ("MNEMO_LOG_LEVEL", "verbose"),
        ("MNEMO_LOG_LEVEL", "fatal"),
        ("MNEMO_AUDIT_LOG_LEVEL", PASTED),
        # checked before anything starts, not once the topics are made
        ("MNEMO_KEY_PEPPER", "short-pepper"),
        # a replication map that does not parse, or is no map, stopped the start with a
        # Python traceback (SyntaxError, ValueError) that named no setting and exited 1
        ("MNEMO_CASSANDRA_REPLICATION", "{'class': 'SimpleStrategy'"),
        ("MNEMO_CASSANDRA_REPLICATION", "['SimpleStrategy', 1]"),
        ("MNEMO_CASSANDRA_REPLICATION", "{'replication_factor': 1}"),
        ("MNEMO_CASSANDRA_REPLICATION", "{'class': 'SimpleStrategy', 'replication_factor': f()}"),
    ],
)
def test_a_bad_value_is_refused_by_name_without_the_value(name: str, value: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_setting_values({"MNEMO_MODE": "distributed", name: value, "PATH": "/bin"})
    assert refused.value.code == "INVALID_SETTING"
    assert refused.value.field == name
    assert name in refused.value.message
    assert value not in str(refused.value) + refused.value.message


def test_good_values_and_other_variables_pass_the_value_check() -> None:
    check_setting_values(
        {
            "MNEMO_MODE": "distributed",
            "MNEMO_CASSANDRA_PORT": "9042",
            "MNEMO_CASSANDRA_REPLICATION": "{'class':'NetworkTopologyStrategy','dc1':3}",
            "MNEMO_INDEXER_BATCH_SIZE": "8",
            "MNEMO_LOG_LEVEL": "warning",
            "MNEMO_REGISTRAR_LOG_LEVEL": "DEBUG",
            "MNEMO_GATEWAY_PORT": "8080",
            "MNEMO_VAULT_TOKEN": "anything at all",
            "MNEMO_API_KEY": "not a setting of a server",
            "MNEMO_TIMEOUT": "not checked here either",
            "PATH": "/bin",
        }
    )


@pytest.mark.parametrize("value", [PASTED, "0.05", "-1", "nan", "inf", "1e309", "86401"])
def test_a_client_timeout_it_cannot_take_is_refused_by_name(value: str) -> None:
    with pytest.raises(InvalidInput) as refused:
        check_client_values({"MNEMO_TIMEOUT": value})
    assert refused.value.code == "INVALID_SETTING"
    assert refused.value.field == "MNEMO_TIMEOUT"
    assert value not in refused.value.message


def test_a_client_timeout_it_can_take_passes() -> None:
    check_client_values({"MNEMO_TIMEOUT": "2.5", "MNEMO_URL": "http://127.0.0.1:8080"})


@pytest.mark.parametrize("name", ["MNEMO_RULES_FILE", "mnemo_pii_policy_file"])
@pytest.mark.parametrize("where", ["missing", "directory", "empty"])
def test_a_file_setting_that_names_no_readable_file_is_refused_by_name(
    name: str, where: str, tmp_path: Path
) -> None:
    value = {"missing": str(tmp_path / "rules.yaml"), "directory": str(tmp_path), "empty": ""}
    with pytest.raises(InvalidInput) as refused:
        check_setting_values({name: value[where]})
    assert refused.value.code == "INVALID_SETTING"
    assert refused.value.field == name
    assert value[where] not in refused.value.message or not value[where]


def test_a_file_setting_that_names_a_readable_file_passes(tmp_path: Path) -> None:
    rules = tmp_path / "rules.yaml"
    rules.write_text("rules: []\n", encoding="utf-8")
    check_setting_values({"MNEMO_RULES_FILE": str(rules), "MNEMO_DECAY_POLICY_FILE": str(rules)})


@pytest.mark.parametrize(
    ("command", "name", "value"),
    [
        (["-m", "mnemo_gateway"], "MNEMO_GATEWAY_PORT", "-1"),
        (["-m", "mnemo_registrar"], "MNEMO_CASSANDRA_PORT", "-5"),
        (["-m", "mnemo_registrar"], "MNEMO_REGISTRAR_HEALTH_PORT", PASTED),
        (["-m", "mnemo", "status"], "MNEMO_KAFKA_SESSION_TIMEOUT", PASTED),
        (["-m", "mnemo_decay"], "MNEMO_LOG_LEVEL", PASTED),
        (["-m", "mnemo_gateway"], "MNEMO_LOG_LEVEL", PASTED),
        (["-m", "mnemo_registrar"], "MNEMO_RULES_FILE", f"/nonexistent/{PASTED}.yaml"),
        (["-m", "mnemo_audit"], "MNEMO_PII_POLICY_FILE", f"/nonexistent/{PASTED}.yaml"),
        # the client's own variable: refused by the CLI before click echoes it back
        (["-m", "mnemo", "status"], "MNEMO_TIMEOUT", PASTED),
        (["-m", "mnemo", "--json", "audit", "verify"], "MNEMO_TIMEOUT", "-1"),
    ],
    ids=[
        "gateway",
        "registrar",
        "registrar-own",
        "cli",
        "decay-log-level",
        "gateway-log-level",
        "registrar-rules-file",
        "audit-policy-file",
        "cli-timeout-word",
        "cli-timeout-negative",
    ],
)
def test_a_process_does_not_start_with_a_bad_value(
    command: list[str], name: str, value: str, tmp_path: Path
) -> None:
    """A configuration error like any other: exit status 78, a code and the variable's name,
    no traceback and not the value."""
    env = {"PATH": "/usr/bin:/bin", "MNEMO_DATA_DIR": str(tmp_path), "MNEMO_MODE": "distributed"}
    env[name] = value
    if "PYTHONPATH" in os.environ:
        env["PYTHONPATH"] = os.environ["PYTHONPATH"]
    done = subprocess.run(
        [sys.executable, *command], env=env, capture_output=True, text=True, timeout=120
    )
    output = done.stderr + done.stdout
    assert done.returncode == 78, output
    assert "INVALID_SETTING" in done.stderr
    assert name in done.stderr
    assert "Traceback" not in output
    assert value not in output
    assert not any(tmp_path.iterdir())


def test_an_installed_image_knows_no_development_or_test_variable(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Outside a source checkout (the container image) the test suite's and the infra
    scripts' variables are unknown names like any other."""
    from mnemo import settings as module

    module._development_variables.cache_clear()
    monkeypatch.setattr(module, "_source_checkout", lambda: None)
    try:
        for name in ("MNEMO_HELM", "MNEMO_CHROMIUM", "MNEMO_KAFKA_PORT"):
            with pytest.raises(UnknownSetting):
                check_environment({name: "x"})
        check_environment({"MNEMO_URL": "http://127.0.0.1:8080", "MNEMO_BATCH_SIZE": "8"})
    finally:
        monkeypatch.undo()
        module._development_variables.cache_clear()
    check_environment({"MNEMO_HELM": "x"})  # in this checkout, a known name


def test_a_listed_tenants_keyspace_is_named_after_the_main_one() -> None:
    from mnemo.bootstrap import tenant_keyspaces
    from mnemo.settings import tenant_keyspace_name

    settings = MnemoSettings(cassandra_keyspace="mnemo", cassandra_tenant_keyspaces="acme, ac-me")
    keyspace_for = tenant_keyspaces(settings)
    assert keyspace_for is not None
    assert keyspace_for("acme") == "mnemo_t_acme"
    hashed = keyspace_for("ac-me")  # a hyphen is no keyspace character: hashed
    assert hashed.startswith("mnemo_t_")
    assert len(hashed) == len("mnemo_t_") + 16
    assert (
        hashed == tenant_keyspace_name("mnemo", "ac-me") != tenant_keyspace_name("mnemo", "ac_me")
    )
    assert keyspace_for("globex") == "mnemo"
    assert tenant_keyspaces(MnemoSettings()) is None
    long = "t" * 48
    assert len(tenant_keyspace_name("mnemo", long)) == len("mnemo_t_") + 16
