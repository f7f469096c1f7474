"""A context section filled from a structured query, over HTTP on an embedded Mnemo: the
template's conditions (checked at registration with QUERY_INVALID), or the request's in
their place; the hits rendered with their place in the document, within the section's
budget, the same bytes twice; the context record holding what was included, and citations
credited only to those."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.e2e.test_documents_http import CONTRACTS, QUESTION, contract, ingest
from tests.support import headers_for

from mnemo.bootstrap import Platform
from mnemo.settings import GatewaySettings

H = headers_for("acme", "agent")

CLAUSES: dict[str, Any] = {
    "name": "contracts",
    "version": 1,
    "sections": [
        {"name": "rules", "priority": 1, "budget": 300, "types": ["constraint"], "query": ""},
        {
            "name": "clauses",
            "heading": "## Matching clauses",
            "priority": 2,
            "budget": 600,
            "where": QUESTION["where"],
            "query": "",
        },
        {"name": "other", "priority": 3, "budget": 600, "types": ["long_term"]},
    ],
}


@pytest.fixture
def client(platform: Platform) -> Iterator[TestClient]:
    with TestClient(create_app(platform, GatewaySettings(wait_timeout=60))) as c:
        # indexed: a ranked section finds every hit in the vector index ("registered", not
        # "pending": the wait was complete)
        for name, data in CONTRACTS.items():
            done = ingest(c, name, data, wait="indexed")
            assert (done.status_code, done.json()["status"]) == (200, "registered"), done.text
        # a matching contract of another subject: never in user:U1's context
        other = contract("HT-2023-0999", "XX科技有限公司", "9%", "人民币650,000元", "2023年9月9日")
        done = ingest(c, "e.txt", other, subject="user:U2", wait="indexed")
        assert (done.status_code, done.json()["status"]) == (200, "registered"), done.text
        yield c


def template(client: TestClient, body: dict[str, Any]) -> Any:
    return client.post("/v1/templates", json=body, headers=H)


def context(client: TestClient, **kw: Any) -> dict[str, Any]:
    body = {"subjects": ["user:U1"], "template": "contracts", "budget": 2_000, **kw}
    answered = client.post("/v1/context", json=body, headers=H)
    assert answered.status_code == 200, answered.text
    result: dict[str, Any] = answered.json()
    return result


def exact_hits(client: TestClient, where: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    found = client.post("/v1/query", json={"where": where, "subjects": ["user:U1"]}, headers=H)
    assert found.status_code == 200, found.text
    return {h["memory_id"]: h for d in found.json()["documents"] for h in d["hits"]}


def in_section(result: dict[str, Any], section: str) -> list[dict[str, Any]]:
    return [i for i in result["included"] if i["section"] == section]


def test_a_section_holds_the_query_hits_with_their_place_and_nothing_else(
    client: TestClient, platform: Platform
) -> None:
    assert template(client, CLAUSES).status_code == 201
    result = context(client, query="违约金是多少")
    hits = exact_hits(client, QUESTION["where"])
    assert hits  # a.txt's sections holding the entities that met the conditions
    shown = in_section(result, "clauses")
    assert {i["memory"]["memory_id"] for i in shown} == set(hits)
    assert {i["via"] for i in shown} == {"query"}
    lines = result["context"].split("## Matching clauses\n", 1)[1].split("\n## ", 1)[0]
    penalty = next(h for h in hits.values() if h["clause"] == "8")
    # one line each: the section's text with its line breaks as spaces, after its place
    assert f"- [§8] {' '.join(penalty['text'].split())}" in lines.splitlines()
    # another contract's penalty clause (3%, 12%) and user:U2's match are not in it
    assert "3%" not in lines
    assert "12%" not in lines
    assert "9%" not in lines
    # the context record lists what was included; a citation is credited only to those
    outside = next(
        i["memory"]["memory_id"]
        for i in result["included"]
        if i["section"] == "other" and "3%" in i["memory"]["content"]
    )
    response = (
        f'8% <memory_ref id="{penalty["memory_id"]}"/> '
        f'not 3% <memory_ref id="{outside}"/> nor <memory_ref id="{"0" * 36}"/>'
    )
    reported = client.post(
        f"/v1/context/{result['request_id']}/response", json={"response": response}, headers=H
    )
    assert reported.status_code == 200, reported.text
    feedback = reported.json()
    assert [c["memory_id"] for c in feedback["cited"]] == [penalty["memory_id"], outside]
    assert feedback["unknown_refs"] == ["0" * 36]
    record = platform.store.context_record("acme", result["request_id"])
    assert record is not None
    assert set(hits) <= set(record.memory_ids)
    assert record.sections[record.memory_ids.index(penalty["memory_id"])] == "clauses"


def test_the_same_request_gives_the_same_bytes_and_ranking_never_widens(
    client: TestClient,
) -> None:
    broad = [{"field": "penalty_rate", "op": "gte", "value": 0.05}]
    ranked = {
        **CLAUSES,
        "name": "ranked",
        "sections": [
            CLAUSES["sections"][0],
            {**CLAUSES["sections"][1], "where": broad, "query": None},
        ],
    }
    del ranked["sections"][1]["query"]
    assert template(client, ranked).status_code == 201
    first = context(client, template="ranked", query="违约金")
    again = context(client, template="ranked", query="违约金")
    assert first["context"] == again["context"]
    shown = in_section(first, "clauses")
    assert {i["memory"]["memory_id"] for i in shown} == set(exact_hits(client, broad))
    assert all(i["score"]["rank"] is not None for i in shown)  # ranked by the query text
    # a query naming nothing in the documents still never brings another memory in
    elsewhere = context(client, template="ranked", query="天气怎么样")
    assert {i["memory"]["memory_id"] for i in in_section(elsewhere, "clauses")} <= set(
        exact_hits(client, broad)
    )


def test_the_section_budget_cuts_whole_lines(client: TestClient) -> None:
    broad = [{"field": "party", "op": "eq", "value": "远山贸易"}]
    small = {
        **CLAUSES,
        "name": "small",
        "sections": [
            CLAUSES["sections"][0],
            {**CLAUSES["sections"][1], "where": broad, "budget": 120},
        ],
    }
    assert template(client, small).status_code == 201
    result = context(client, template="small")
    hits = exact_hits(client, broad)
    shown = in_section(result, "clauses")
    assert 0 < len(shown) < len(hits)
    assert result["section_tokens"]["clauses"] <= 120
    cut = {o["memory_id"] for o in result["left_out"] if o["section"] == "clauses"}
    assert {o["reason"] for o in result["left_out"] if o["memory_id"] in cut} == {"budget"}
    assert cut | {i["memory"]["memory_id"] for i in shown} == set(hits)


def test_the_request_may_fill_the_section_with_its_own_conditions(client: TestClient) -> None:
    assert template(client, CLAUSES).status_code == 201
    zz = [{"field": "party_a", "op": "eq", "value": "ZZ集团"}]
    result = context(client, where={"clauses": zz})
    shown = in_section(result, "clauses")
    assert {i["memory"]["memory_id"] for i in shown} == set(exact_hits(client, zz))
    assert any("ZZ集团" in i["memory"]["content"] for i in shown)
    for where, field in [
        ({"nope": zz}, "where.nope"),
        ({"rules": zz}, "where.rules"),
        ({"clauses": []}, "where.clauses"),
        ({"clauses": [{"field": "party_a", "op": "gt", "value": "x"}]}, "where.clauses[0].op"),
        ({"clauses": [{"field": "amount", "op": "gt", "value": "lots"}]}, "where.clauses[0].value"),
    ]:
        body = {"subjects": ["user:U1"], "template": "contracts", "where": where}
        refused = client.post("/v1/context", json=body, headers=H)
        assert refused.status_code == 400, (where, refused.text)
        error = refused.json()["error"]
        assert (error["code"], error["field"]) == ("QUERY_INVALID", field)


@pytest.mark.parametrize(
    ("condition", "path"),
    [
        ({"field": "nope", "op": "eq", "value": "x"}, "where[0].field"),
        ({"field": "penalty_rate", "op": "within", "value": "2023"}, "where[0].op"),
        ({"field": "signed_at", "op": "within", "value": "2023-Q5"}, "where[0].value"),
    ],
)
def test_a_template_with_a_bad_query_is_refused_where_it_comes_in(
    client: TestClient, condition: dict[str, Any], path: str
) -> None:
    bad = {
        **CLAUSES,
        "name": "bad",
        "sections": [CLAUSES["sections"][0], {**CLAUSES["sections"][1], "where": [condition]}],
    }
    refused = template(client, bad)
    assert refused.status_code == 400, refused.text
    error = refused.json()["error"]
    assert (error["code"], error["field"]) == ("QUERY_INVALID", f"sections.1.{path}")
    event = {
        "type": "TemplateRegistered",
        "schema_version": 1,
        "stream": "templates",
        "payload": {"template": bad},
    }
    published = client.post("/v1/events", json={"events": [event]}, headers=H)
    assert published.status_code == 400, published.text
    error = published.json()["error"]
    assert (error["code"], error["field"]) == (
        "QUERY_INVALID",
        f"events[0].payload.template.sections.1.{path}",
    )
    assert client.get("/v1/templates/bad", headers=H).status_code == 404
