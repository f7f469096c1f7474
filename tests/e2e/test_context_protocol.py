"""The context protocol end to end over HTTP: templates, assembly under a budget with the
reasons for what was left out, determinism across processes, the audit record, and
feedback on the model's answer (citations, corrections, guarded constraints)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import TEST_TENANTS, headers_for, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.adapters.toktok_tokenizer import ToktokTokenizer, encoding_for_model
from mnemo.bootstrap import Platform, build_embedded
from mnemo.domain.context import MAX_TEMPLATE_VERSION, ContextTemplate
from mnemo.service.runner import CONSUMERS
from mnemo.settings import GatewaySettings, MnemoSettings

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
H = headers_for("acme", "planner")
OTHER = headers_for("globex", "intruder")

SUPPORT: dict[str, Any] = {
    "name": "support",
    "version": 1,
    "description": "help desk",
    # listed out of priority order on purpose: rendering follows the priorities
    "sections": [
        {"name": "notes", "priority": 3, "budget": 400, "types": ["context", "history"]},
        {
            "name": "rules",
            "priority": 1,
            "budget": 300,
            "types": ["constraint"],
            "query": "",
            "render": "- {text}",
        },
        {
            "name": "profile",
            "priority": 2,
            "budget": 400,
            "types": ["preference", "fact"],
            "render": "- {text} (w {weight:.2f})",
            "kv_render": "- {key} = {value} (v{version})",
        },
    ],
}


def declared(memory: dict[str, Any], stream: str = "user:U1") -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": memory},
    }


def publish(client: TestClient, *events: dict[str, Any], headers: dict[str, str] = H) -> list[str]:
    """Publish and wait until indexed; the memory id each event registered."""
    r = client.post("/v1/events?wait=indexed", json={"events": list(events)}, headers=headers)
    assert r.status_code == 202, r.text
    body = r.json()
    assert body["complete"] is True
    outcomes = [a["outcomes"][0] for a in body["accepted"]]
    assert all(o["outcome"] in ("registered", "superseded") for o in outcomes), outcomes
    return [str(o["memory_id"]) for o in outcomes]


def settle(platform: Platform) -> None:
    """Wait until every consumer has caught up, including with what consumers emitted."""
    for _ in range(20):
        head = platform.log.head()
        for consumer in CONSUMERS:
            assert platform.runner.wait_for(consumer, head, 60), consumer
        if platform.log.head() == head:
            return
    raise AssertionError("the consumers never caught up")


def count(text: str, tokenizer: str) -> int:
    return ToktokTokenizer(encoding_for_model(tokenizer)).count([text])[0]


def sections_of(context: str) -> dict[str, list[str]]:
    """The rendered context as {heading: lines}, in order."""
    out: dict[str, list[str]] = {}
    current = ""
    for line in context.splitlines()[1:]:
        if line.startswith("## "):
            current = line
            out[current] = []
        else:
            out[current].append(line)
    return out


def replay(client: TestClient, stream: str, headers: dict[str, str] = H) -> list[dict[str, Any]]:
    r = client.get(f"/v1/subjects/{stream}/events", params={"from_seq": 1}, headers=headers)
    assert r.status_code == 200
    events: list[dict[str, Any]] = r.json()["events"]
    return events


def open_platform(data: Path) -> Platform:
    built = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL"),
        clock=FixedClock(T0),
    )
    install_keys(built, *TEST_TENANTS)
    return built


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as c:
        yield c


# ---- templates ----------------------------------------------------------------------------


def test_templates_register_list_get(client: TestClient) -> None:
    fingerprint = ContextTemplate.model_validate(SUPPORT).fingerprint()
    first = client.post("/v1/templates", json=SUPPORT, headers=H)
    assert first.status_code == 201, first.text
    assert first.json()["created"] is True
    assert first.json()["fingerprint"] == fingerprint
    assert first.json()["template"]["sections"][1]["name"] == "rules"

    again = client.post("/v1/templates", json=SUPPORT, headers=H)
    assert again.status_code == 200
    assert again.json() | {"created": True} == first.json()
    assert again.json()["created"] is False

    changed = {**SUPPORT, "description": "something else"}
    taken = client.post("/v1/templates", json=changed, headers=H)
    assert taken.status_code == 409
    assert taken.json()["error"]["code"] == "TEMPLATE_VERSION_EXISTS"

    bad_section = {**SUPPORT["sections"][1], "render": "- {text} {password}"}
    invalid = {**SUPPORT, "version": 2, "sections": [bad_section]}
    refused = client.post("/v1/templates", json=invalid, headers=H)
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["code"] == "TEMPLATE_INVALID"
    assert error["field"] == "sections.0.render"
    for field, text in (("budget", "200"), ("limit", True), ("priority", 2.0)):
        section = {**SUPPORT["sections"][1], field: text}
        refused = client.post(
            "/v1/templates", json={**SUPPORT, "version": 2, "sections": [section]}, headers=H
        )
        assert refused.status_code == 400, refused.text
        assert refused.json()["error"]["field"] == f"sections.0.{field}"
        assert refused.json()["error"]["code"] == "TEMPLATE_INVALID"
    dup = {**SUPPORT, "version": 2, "sections": [SUPPORT["sections"][0]] * 2}
    assert client.post("/v1/templates", json=dup, headers=H).json()["error"]["code"] == (
        "TEMPLATE_INVALID"
    )

    v2 = {**SUPPORT, "version": 2, "description": "v2"}
    assert client.post("/v1/templates", json=v2, headers=H).status_code == 201

    listed = client.get("/v1/templates", headers=H).json()
    names = [(t["template"]["name"], t["template"]["version"]) for t in listed]
    assert names == [("default", 1), ("support", 1), ("support", 2)]
    assert listed[1]["fingerprint"] == fingerprint

    latest = client.get("/v1/templates/support", headers=H).json()
    assert latest["template"]["version"] == 2
    pinned = client.get("/v1/templates/support", params={"version": 1}, headers=H).json()
    assert pinned["fingerprint"] == fingerprint
    assert client.get("/v1/templates/default", headers=H).status_code == 200
    missing = client.get("/v1/templates/nope", headers=H)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "TEMPLATE_NOT_FOUND"

    # another tenant has only the built-in template
    assert client.get("/v1/templates/support", headers=OTHER).status_code == 404
    theirs = client.get("/v1/templates", headers=OTHER).json()
    assert [t["template"]["name"] for t in theirs] == ["default"]


# ---- assembly -----------------------------------------------------------------------------


def seed(client: TestClient) -> dict[str, str]:
    """Memories for the support template; returns their ids by name."""
    names = [
        "rule",
        "size_l",
        "lyon",
        "nights",
        "cats",
        "parcel",
        "trip",
        "train",
        "printer",
        "refund",
    ]
    ids = publish(
        client,
        declared(
            {
                "type": "constraint",
                "key": "credit",
                "value": "no-minors",
                "content": "Never offer credit to minors.",
                "semantic_weight": 0.9,
                "provenance": {"trust": 0.9},
            }
        ),
        declared({"type": "preference", "key": "size", "value": "L"}),
        declared({"type": "fact", "content": "The user lives in Lyon.", "semantic_weight": 0.8}),
        declared(
            {"type": "fact", "content": "The user works night shifts.", "semantic_weight": 0.6}
        ),
        declared({"type": "fact", "content": "The user has two cats.", "semantic_weight": 0.4}),
        declared(
            {"type": "context", "content": "A parcel is due this afternoon.", "ttl_seconds": 3600}
        ),
        declared(
            {"type": "context", "content": "Planning a trip to Kyoto.", "semantic_weight": 0.9}
        ),
        declared(
            {"type": "context", "content": "Asked about train times.", "semantic_weight": 0.2}
        ),
        declared(
            {"type": "history", "content": "Reported a broken printer.", "semantic_weight": 0.5}
        ),
        declared({"type": "history", "content": "Got a refund in May.", "semantic_weight": 0.3}),
    )
    found = dict(zip(names, ids, strict=True))
    (found["size_xl"],) = publish(
        client, declared({"type": "preference", "key": "size", "value": "XL"})
    )
    (found["policy"],) = publish(
        client,
        declared(
            {
                "type": "constraint",
                "key": "credit",
                "value": "anyone",
                "content": "Credit can be offered to any customer.",
                "provenance": {"trust": 0.3},
            },
            stream="policy:acme",
        ),
    )
    return found


def test_a_template_version_beyond_what_a_store_keeps_is_refused_at_every_door(
    client: TestClient, platform: Platform
) -> None:
    """Versions are kept in 32 bits; one above that is the caller's error (4xx) wherever it
    comes in, never a store that cannot bind it (500) nor an event the registrar refuses
    after its 202."""
    beyond = MAX_TEMPLATE_VERSION + 1
    before = platform.log.head()
    answers = {
        "register": client.post("/v1/templates", json={**SUPPORT, "version": beyond}, headers=H),
        "event": client.post(
            "/v1/events",
            json={
                "type": "TemplateRegistered",
                "schema_version": 1,
                "stream": "templates",
                "payload": {"template": {**SUPPORT, "version": beyond}},
            },
            headers=H,
        ),
        "get": client.get(f"/v1/templates/support?version={beyond}", headers=H),
        "context": client.post(
            "/v1/context",
            json={"subjects": ["user:U1"], "template": "support", "template_version": beyond},
            headers=H,
        ),
    }
    for door, answer in answers.items():
        assert 400 <= answer.status_code < 500, (door, answer.status_code, answer.text)
        assert answer.json()["error"]["code"] in {
            "VALIDATION_ERROR",
            "TEMPLATE_INVALID",
            "INVALID_PAYLOAD",
        }, door
    assert platform.log.head() == before
    highest = {**SUPPORT, "version": MAX_TEMPLATE_VERSION}
    assert client.post("/v1/templates", json=highest, headers=H).status_code == 201
    got = client.get(f"/v1/templates/support?version={MAX_TEMPLATE_VERSION}", headers=H)
    assert got.json()["template"]["version"] == MAX_TEMPLATE_VERSION


def test_assembly_with_a_template_under_a_budget(client: TestClient, platform: Platform) -> None:
    fingerprint = client.post("/v1/templates", json=SUPPORT, headers=H).json()["fingerprint"]
    ids = seed(client)
    as_of = (T0 + timedelta(hours=2)).isoformat()  # the parcel's hour is over; not yet scanned
    request = {
        "subjects": ["user:U1", "policy:acme"],
        "query": "what size should we recommend to the user",
        "template": "support",
        "as_of": as_of,
    }
    full = client.post("/v1/context", json=request | {"budget": 4_000}, headers=H).json()
    assert [x["reason"] for x in full["left_out"] if x["reason"] == "budget"] == []
    r = client.post("/v1/context", json=request | {"budget": full["tokens"] - 1}, headers=H)
    assert r.status_code == 200, r.text
    body = r.json()
    text = body["context"]
    tokenizer = body["tokenizer"]
    assert tokenizer == "cl100k_base"

    # header, and sections in priority order whatever order the template lists them in
    lines = text.splitlines()
    assert lines[0] == f"[MNEMO-CONTEXT v1 | fp:{fingerprint} | tpl:support@1]"
    assert (body["template"], body["fingerprint"], body["protocol"]) == (
        "support@1",
        fingerprint,
        "v1",
    )
    assert body["downgraded_from"] is None
    assert [ln for ln in lines if ln.startswith("## ")] == ["## rules", "## profile", "## notes"]
    assert body["tokens"] == count(text, tokenizer) <= body["budget"] == full["tokens"] - 1

    # the lowest-priority section gave up its lightest memory
    reasons = {(x["memory_id"], x["reason"]) for x in body["left_out"]}
    assert (ids["train"], "budget") in reasons
    assert [x["memory_id"] for x in body["left_out"] if x["reason"] == "budget"] == [ids["train"]]
    assert (ids["size_l"], "superseded") in reasons
    assert (ids["policy"], "conflict") in reasons
    assert (ids["parcel"], "expired") in reasons
    assert body["conflicts"] == [
        {
            "key": "credit",
            "kept": ids["rule"],
            "kept_trust": 0.9,
            "dropped": ids["policy"],
            "dropped_trust": 0.3,
        }
    ]
    included = {i["memory"]["memory_id"]: i for i in body["included"]}
    assert ids["train"] not in included
    assert ids["parcel"] not in included
    assert ids["size_l"] not in included
    assert ids["policy"] not in included
    assert {ids["rule"], ids["size_xl"], ids["lyon"], ids["trip"]} <= set(included)

    # per-memory metadata: section, rank, tokens of its own line, score components
    rendered = sections_of(text)
    for section in ("rules", "profile", "notes"):
        mine = [i for i in body["included"] if i["section"] == section]
        assert [i["rank"] for i in mine] == list(range(1, len(mine) + 1))
        block = rendered[f"## {section}"]
        assert len(block) == len(mine)
        for inc, line in zip(mine, block, strict=True):
            memory = inc["memory"]
            assert (memory["content"] or f"{memory['key']} = {memory['value']}") in line
            assert inc["tokens"] == count(line, tokenizer)
            s = inc["score"]
            expected = (
                s["relevance"]
                * (0.5 + s["weight"])
                * (0.75 + 0.25 * s["freshness"])
                * (0.75 + 0.25 * s["trust"])
            )
            assert s["score"] == pytest.approx(expected, abs=1e-6)
            assert 0.0 < s["relevance"] <= 1.0
        assert body["section_tokens"][section] == count(
            "\n".join([f"## {section}", *block]), tokenizer
        )
    rule = included[ids["rule"]]
    assert rule["score"]["relevance"] == 1.0
    assert rule["score"]["rank"] is None
    assert rule["score"]["trust"] == 0.9
    ranks = [i["score"]["rank"] for i in body["included"] if i["section"] == "profile"]
    assert 1 in ranks  # the profile section is ranked by the query: its best is in it
    assert "- size = XL (v2)" in rendered["## profile"]
    assert "- The user lives in Lyon. (w 0.80)" in rendered["## profile"]

    # with history: the older version is rendered too, next to the current one
    with_history = client.post(
        "/v1/context", json=request | {"budget": 4_000, "include_history": True}, headers=H
    ).json()
    profile = sections_of(with_history["context"])["## profile"]
    assert "- size = L (v1)" in profile
    assert "- size = XL (v2)" in profile
    old = next(i for i in with_history["included"] if i["memory"]["memory_id"] == ids["size_l"])
    assert old["via"] == "history"
    assert old["memory"]["status"] == "superseded"
    assert (ids["size_l"], "superseded") not in {
        (x["memory_id"], x["reason"]) for x in with_history["left_out"]
    }

    # the audit record: ContextAssembled in the first subject's stream
    settle(platform)
    events = replay(client, "user:U1")
    audit = next(
        e
        for e in events
        if e["type"] == "ContextAssembled" and e["payload"]["request_id"] == body["request_id"]
    )
    assert audit["event_id"] == body["request_id"]
    payload = audit["payload"]
    assert list(payload["memory_ids"]) == [i["memory"]["memory_id"] for i in body["included"]]
    assert list(payload["sections"]) == [i["section"] for i in body["included"]]
    assert list(payload["truncated"]) == [ids["train"]]
    assert f"{ids['policy']}:conflict" in payload["left_out"]
    assert payload["template"] == "support@1"
    assert payload["template_fingerprint"] == fingerprint
    assert payload["rendered_tokens"] == body["tokens"]
    assert payload["budget"] == body["budget"]
    assert "what size" not in str(payload), "the query itself is not kept"
    stats = {s.memory_id: s for s in platform.store.memory_stats("acme", list(ids.values()))}
    assert stats[ids["train"]].truncated >= 1
    assert stats[ids["rule"]].included >= 3

    # another tenant sees none of it
    assert [e for e in replay(client, "user:U1", OTHER)] == []
    theirs = client.post("/v1/context", json=request | {"template": "default"}, headers=OTHER)
    assert theirs.status_code == 200
    assert theirs.json()["included"] == []
    assert client.post("/v1/context", json=request, headers=OTHER).status_code == 404


def test_the_same_request_renders_the_same_bytes_across_processes(tmp_path: Path) -> None:
    data = tmp_path / "data"
    request = {
        "subjects": ["user:U1", "policy:acme"],
        "query": "where does the user live",
        "template": "support",
        "budget": 100,
        "as_of": (T0 + timedelta(minutes=5)).isoformat(),
    }
    first = open_platform(data)
    try:
        with TestClient(create_app(first)) as c:
            assert c.post("/v1/templates", json=SUPPORT, headers=H).status_code == 201
            seed(c)
            one = c.post("/v1/context", json=request, headers=H).json()
            two = c.post("/v1/context", json=request, headers=H).json()
    finally:
        first.close()
    assert one["request_id"] != two["request_id"]
    assert one["context"].encode() == two["context"].encode()
    assert one["included"] == two["included"]
    assert one["left_out"] == two["left_out"]
    assert any(x["reason"] == "budget" for x in one["left_out"]), "the budget must bite"

    # then in two fresh interpreters, each with its own string hash seed, one after the other
    # (the data directory has one opener at a time)
    for hash_seed in ("0", "4242"):
        out = subprocess.run(
            [sys.executable, "-c", _RENDER_ELSEWHERE, str(data), json.dumps(request)],
            cwd=REPO,
            env={**os.environ, "PYTHONHASHSEED": hash_seed},
            capture_output=True,
            timeout=300,
            check=False,
        )
        assert out.returncode == 0, out.stderr.decode()[-3_000:]
        three = json.loads(out.stdout)
        assert three["context"].encode() == one["context"].encode()
        assert three["included"] == one["included"]
        assert three["section_tokens"] == one["section_tokens"]


REPO = Path(__file__).resolve().parents[2]
_RENDER_ELSEWHERE = """
import json, sys
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.e2e.test_context_protocol import H, open_platform
platform = open_platform(__import__("pathlib").Path(sys.argv[1]))
try:
    with TestClient(create_app(platform)) as c:
        r = c.post("/v1/context", json=json.loads(sys.argv[2]), headers=H)
        assert r.status_code == 200, r.text
        sys.stdout.write(r.text)
finally:
    platform.close()
"""


def test_protocol_negotiation_and_bad_requests(client: TestClient) -> None:
    base = {"subjects": ["user:U1"], "query": "hello"}
    r = client.post("/v1/context", json=base | {"protocol": "v2"}, headers=H)
    assert r.status_code == 400
    error = r.json()["error"]
    assert error["code"] == "PROTOCOL_MISMATCH"
    assert error["supported_versions"] == ["v1"]
    assert error["field"] == "protocol"

    down = client.post(
        "/v1/context", json=base | {"protocol": "v2", "allow_downgrade": True}, headers=H
    )
    assert down.status_code == 200
    body = down.json()
    assert (body["protocol"], body["downgraded_from"]) == ("v1", "v2")
    assert body["context"].startswith("[MNEMO-CONTEXT v1 | fp:")

    naive = client.post("/v1/context", json=base | {"as_of": "2026-12-01T00:00:00"}, headers=H)
    assert naive.status_code == 422
    assert naive.json()["error"]["code"] == "VALIDATION_ERROR"
    unknown = client.post("/v1/context", json=base | {"template": "nope"}, headers=H)
    assert unknown.status_code == 404
    assert unknown.json()["error"]["code"] == "TEMPLATE_NOT_FOUND"
    small = client.post("/v1/context", json=base | {"budget": 16}, headers=H)
    assert small.status_code == 400
    assert small.json()["error"]["code"] == "BUDGET_TOO_SMALL"
    tok = client.post("/v1/context", json=base | {"tokenizer": "gpt-4o"}, headers=H).json()
    assert tok["tokenizer"] == "o200k_base"
    assert tok["tokens"] == count(tok["context"], "o200k_base")


# ---- feedback -----------------------------------------------------------------------------


def test_feedback_citations_corrections_and_guards(client: TestClient, platform: Platform) -> None:
    ids = publish(
        client,
        declared({"type": "fact", "content": "The user lives in Lyon."}),
        declared({"type": "preference", "content": "The user prefers green tea."}),
        declared({"type": "fact", "content": "The user has two cats."}),
        declared(
            {
                "type": "constraint",
                "content": "禁止向未成年人推荐信贷产品",
                "semantic_weight": 0.9,
                "guard": {
                    "rule_id": "no-credit-minors",
                    "patterns": ["信贷|loan"],
                    "break_on_violation": True,
                },
            }
        ),
    )
    lyon, tea, cats, rule = ids
    ctx = client.post(
        "/v1/context",
        json={"subjects": ["user:U1"], "query": "where does the user live"},
        headers=H,
    ).json()
    used = [i["memory"]["memory_id"] for i in ctx["included"]]
    assert set(used) == set(ids)
    request_id = ctx["request_id"]

    # short on purpose: where a citation sits is judged on the words, not on the tags
    answer = (
        f'<memory_ref id="{lyon}"/> Lyon, near tea shops. '
        f'<memory_ref id="nope"/><memory_ref id="{tea}"/>'
    )
    r = client.post(f"/v1/context/{request_id}/response", json={"response": answer}, headers=H)
    assert r.status_code == 200, r.text
    fb = r.json()
    assert fb["cited"] == [
        {"memory_id": lyon, "position": "beginning"},
        {"memory_id": tea, "position": "end"},
    ]
    assert fb["unknown_refs"] == ["nope"]
    assert fb["corrected"] == []
    assert len(fb["response_hash"]) == 64

    settle(platform)
    events = replay(client, "user:U1")
    cited = [e["payload"] for e in events if e["type"] == "MemoryCited"]
    assert [(c["memory_id"], c["position"], c["request_id"]) for c in cited] == [
        (lyon, "beginning", request_id),
        (tea, "end", request_id),
    ]
    reported = [e["payload"] for e in events if e["type"] == "ContextResponseReported"]
    assert reported[-1]["cited"] == [lyon, tea]
    lyon_now = client.get(f"/v1/memories/{lyon}", headers=H).json()
    tea_now = client.get(f"/v1/memories/{tea}", headers=H).json()
    cats_now = client.get(f"/v1/memories/{cats}", headers=H).json()
    assert lyon_now["semantic_weight"] == pytest.approx(0.55)
    assert lyon_now["provenance"]["trust"] == pytest.approx(0.52)
    assert tea_now["semantic_weight"] == pytest.approx(0.52)
    assert cats_now["semantic_weight"] == pytest.approx(0.5)
    stats = {s.memory_id: s for s in platform.store.memory_stats("acme", ids)}
    assert (stats[lyon].included, stats[lyon].cited) == (1, 1)
    assert (stats[cats].included, stats[cats].cited) == (1, 0)

    # the same report again (a retried call) is recorded, and counted, once
    retry = client.post(f"/v1/context/{request_id}/response", json={"response": answer}, headers=H)
    assert retry.json() == fb
    settle(platform)
    events_again = replay(client, "user:U1")
    assert len(events_again) == len(events)
    assert client.get(f"/v1/memories/{lyon}", headers=H).json()["semantic_weight"] == (
        pytest.approx(0.55)
    )
    assert platform.store.memory_stats("acme", [lyon])[0].cited == 1

    # a correction of white space or invisible characters only is no correction, as ""
    # is: nothing loses weight or trust
    for blank in (" ", "\u200b", "\u0000", "\u0001 "):
        r = client.post(
            f"/v1/context/{request_id}/response",
            json={"response": "The user lives in Lyon.", "correction": blank},
            headers=H,
        )
        assert (r.status_code, r.json()["corrected"]) == (200, []), r.text
    settle(platform)
    assert client.get(f"/v1/memories/{lyon}", headers=H).json()["semantic_weight"] == (
        pytest.approx(0.55)
    )
    assert platform.store.memory_stats("acme", [lyon])[0].corrected == 0

    # a correction lowers what was used
    r = client.post(
        f"/v1/context/{request_id}/response",
        json={
            "response": "The user lives in Paris.",
            "correction": "I moved to Paris",
            "corrected_memory_ids": [lyon],
        },
        headers=H,
    )
    assert r.status_code == 200
    assert r.json()["corrected"] == [lyon]
    settle(platform)
    lyon_after = client.get(f"/v1/memories/{lyon}", headers=H).json()
    assert lyon_after["semantic_weight"] == pytest.approx(0.55 * 0.7)
    assert lyon_after["provenance"]["trust"] == pytest.approx(0.42)
    assert client.get(f"/v1/memories/{cats}", headers=H).json()["semantic_weight"] == 0.5
    assert platform.store.memory_stats("acme", [lyon])[0].corrected == 1
    corrected = [e["payload"] for e in replay(client, "user:U1") if e["type"] == "MemoryCorrected"]
    assert [(c["memory_ids"], c["request_id"]) for c in corrected] == [([lyon], request_id)]
    # without naming them, a correction applies to every memory the context used
    r = client.post(
        f"/v1/context/{request_id}/response",
        json={"response": "You have three cats.", "correction": "wrong count"},
        headers=H,
    )
    assert r.json()["corrected"] == used
    settle(platform)
    assert client.get(f"/v1/memories/{cats}", headers=H).json()["semantic_weight"] == (
        pytest.approx(0.35)
    )
    assert platform.store.memory_stats("acme", [cats])[0].corrected == 1

    # the guarded constraint was in the context: an answer offering a loan breaks it
    for bad in ("Sure, we can offer your son a loan.", "可以给他推荐信贷产品"):
        broken = client.post(
            f"/v1/context/{request_id}/response", json={"response": bad}, headers=H
        )
        assert broken.status_code == 422
        error = broken.json()["error"]
        assert error["code"] == "CONSTRAINT_VIOLATION"
        assert error["rule_ids"] == ["no-credit-minors"]
    settle(platform)
    violations = [
        e["payload"]["violations"]
        for e in replay(client, "user:U1")
        if e["type"] == "ContextResponseReported"
    ]
    assert violations[-2:] == [["no-credit-minors"], ["no-credit-minors"]]
    assert rule in used

    # unknown request ids, and other tenants
    missing = client.post("/v1/context/nope/response", json={"response": "hi"}, headers=H)
    assert missing.status_code == 404
    assert missing.json()["error"]["code"] == "CONTEXT_NOT_FOUND"
    foreign = client.post(
        f"/v1/context/{request_id}/response", json={"response": "hi"}, headers=OTHER
    )
    assert foreign.status_code == 404
    assert foreign.json()["error"]["code"] == "CONTEXT_NOT_FOUND"
    assert client.get(f"/v1/memories/{lyon}", headers=OTHER).status_code == 404
    empty = client.post(
        "/v1/context", json={"subjects": ["user:U1"], "query": "where"}, headers=OTHER
    ).json()
    assert empty["included"] == []
    assert "Lyon" not in empty["context"]


def test_an_answer_without_guarded_constraints_is_not_checked(client: TestClient) -> None:
    (rule,) = publish(
        client,
        declared(
            {
                "type": "constraint",
                "content": "Loans are only for adults.",
                "guard": {
                    "rule_id": "loans-adults",
                    "patterns": ["loan"],
                    "break_on_violation": False,
                },
            }
        ),
    )
    ctx = client.post("/v1/context", json={"subjects": ["user:U1"]}, headers=H).json()
    assert [i["memory"]["memory_id"] for i in ctx["included"]] == [rule]
    r = client.post(
        f"/v1/context/{ctx['request_id']}/response",
        json={"response": "A loan is possible."},
        headers=H,
    )
    assert r.status_code == 200


def test_a_constraint_declared_again_with_a_wider_guard_keeps_the_new_guard(
    client: TestClient,
) -> None:
    """The probe's sequence: a constraint guarded by "loan", declared again guarded by
    "loan" and "credit card", came back `duplicate` with the old memory, and an answer
    offering a credit card passed. The guard is part of what the constraint says."""
    rule = "no credit offers to minors"

    def guarded(*patterns: str) -> dict[str, Any]:
        guard = {"rule_id": "no-credit", "patterns": list(patterns)}
        return declared({"type": "constraint", "content": rule, "guard": guard}, "user:G1")

    (first,) = publish(client, guarded("loan"))
    (second,) = publish(client, guarded("loan", "credit card"))
    assert second != first
    ctx = client.post("/v1/context", json={"subjects": ["user:G1"]}, headers=H).json()
    assert second in [i["memory"]["memory_id"] for i in ctx["included"]]
    for bad in ("Here is a great credit card for you", "A small loan, then?"):
        r = client.post(
            f"/v1/context/{ctx['request_id']}/response", json={"response": bad}, headers=H
        )
        assert r.status_code == 422, r.text
        assert r.json()["error"]["code"] == "CONSTRAINT_VIOLATION"
    fine = client.post(
        f"/v1/context/{ctx['request_id']}/response",
        json={"response": "Here is a warm winter jacket."},
        headers=H,
    )
    assert fine.status_code == 200, fine.text


def test_a_reported_answers_event_ids_test_no_guess_of_its_words(
    client: TestClient, platform: Platform
) -> None:
    """The events a report appends have ids derived from it, so that a retry collapses in
    the log. Derived from the answer's plain SHA-256, the id in clear let anyone holding the
    log test a guessed answer (or a guessed correction) against it, as the answer's hash did;
    they are derived from a keyed hash of the answer under the stream's search key."""
    import hashlib

    from mnemo.domain.ids import derived_id

    r = client.post(
        "/v1/events?wait=registered",
        json=declared({"type": "fact", "content": "lives near the tea shops in Lyon"}),
        headers=H,
    )
    assert r.status_code == 202, r.text
    r = client.post(
        "/v1/context", json={"subjects": ["user:U1"], "query": "tea", "budget": 500}, headers=H
    )
    assert r.status_code == 200, r.text
    request_id = r.json()["request_id"]
    answer = "Zyxwvuta Quirkmeister lives in Wangjing"
    r = client.post(f"/v1/context/{request_id}/response", json={"response": answer}, headers=H)
    assert r.status_code == 200, r.text
    again = client.post(f"/v1/context/{request_id}/response", json={"response": answer}, headers=H)
    assert again.status_code == 200, again.text
    settle(platform)
    logged = [e.envelope for e in platform.log.read(0, 10_000)]
    [assembled] = [e for e in logged if e.event_id == request_id]
    [reported] = [e for e in logged if e.type == "ContextResponseReported"]  # once: a retry
    guess = derived_id(
        assembled.occurred_at,
        "feedback",
        "acme",
        request_id,
        hashlib.sha256(answer.encode()).hexdigest(),
        "",
        "",
        "ContextResponseReported",
        "",
    )
    assert reported.event_id != guess
