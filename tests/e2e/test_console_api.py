"""The console's insight endpoints over HTTP, on data seeded through Mnemo itself: heat-map
counts and classes, a memory's life, the context inspector, the filtered event tail,
rejections, dead letters, audit verification (and tampering), tenant isolation, and the
static page. `seed` is shared with the browser test (test_console_browser.py)."""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from mnemo_gateway.app import create_app
from tests.support import TEST_TENANTS, headers_for, install_keys

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform, build_embedded
from mnemo.service.app import RequestContext
from mnemo.service.context import ContextRequest
from mnemo.service.insights import HEAT_COLOURS, Heat, heat_of
from mnemo.settings import MnemoSettings

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)

ACME = RequestContext("acme", "seeder")
GLOBEX = RequestContext("globex", "seeder")
H = headers_for("acme", "console-test")
OTHER = headers_for("globex", "intruder")
CONSOLE_DIR = Path(__file__).parents[2] / "services/gateway/mnemo_gateway/console"

# Two templates make the counters exact: "roomy" renders every memory of the subject;
# "tight" renders the memories tagged pin, and its 12-token sections for the constraints
# (which must come first and take them all) and for those tagged cut can hold none of them
# (each is one long sentence, so it cannot be trimmed either).
ROOMY = {
    "name": "roomy",
    "version": 1,
    "sections": [{"name": "all", "priority": 1, "budget": 3000, "query": ""}],
}
TIGHT = {
    "name": "tight",
    "version": 1,
    "sections": [
        {"name": "rules", "priority": 1, "budget": 12, "types": ["constraint"], "query": ""},
        {"name": "pinned", "priority": 2, "budget": 400, "tags": ["pin"], "query": ""},
        {"name": "long", "priority": 3, "budget": 12, "tags": ["cut"], "query": ""},
    ],
}


def declared(memory: dict[str, Any], stream: str = "user:U1") -> dict[str, Any]:
    return {
        "type": "MemoryDeclared",
        "schema_version": 1,
        "stream": stream,
        "payload": {"memory": memory},
    }


@dataclass(frozen=True)
class Seeded:
    ids: dict[str, str]  # name -> memory id
    contexts: dict[str, str]  # name -> request id
    other: str  # globex's memory
    rejected: list[str]  # event ids registration rejected, oldest first


# name -> (included, truncated, cited, heat) after `seed`
EXPECTED: dict[str, tuple[int, int, int, Heat]] = {
    "hot": (2, 2, 2, Heat.HOT),
    "warm": (4, 0, 3, Heat.WARM),
    "cool": (2, 2, 0, Heat.COOL),
    "rule": (2, 2, 0, Heat.COOL),
    "tea": (4, 0, 0, Heat.NEUTRAL),
    "idle": (0, 0, 0, Heat.NEUTRAL),
}


def seed(platform: Platform, clock: FixedClock) -> Seeded:
    """Memories, contexts under two budgets, answers with citations, a correction, an
    expiry and two rejections, all through Mnemo's use cases; consumers drained."""
    mnemo = platform.app
    drain = platform.runner.drain

    def publish(ctx: RequestContext, *events: dict[str, Any]) -> list[str]:
        result = mnemo.publish(ctx, list(events))
        drain()
        ids = []
        for a in result.accepted:
            outcome = mnemo.outcome(ctx, a.event_id)[0]
            ids.append(outcome.memory_id or a.event_id)
        return ids

    for template in (ROOMY, TIGHT):
        mnemo.register_template(ACME, template)
    drain()
    long = "The user {} on every trip across Europe since 2019 including seats and delays."
    hot, seat_v1, cool, rule, tea = publish(
        ACME,
        declared(
            {
                "type": "fact",
                "content": long.format("keeps a detailed travel diary of each train journey"),
                "tags": ["cut"],
                "semantic_weight": 0.8,
            }
        ),
        declared(
            {
                "type": "preference",
                "key": "seat",
                "value": "window",
                "tags": ["pin"],
                "semantic_weight": 0.6,
            }
        ),
        declared(
            {
                "type": "fact",
                "content": long.format("collects paper tickets and the receipts of each meal"),
                "tags": ["cut"],
                "semantic_weight": 0.3,
            }
        ),
        declared(
            {
                "type": "constraint",
                "scope": "tenant",
                "content": "Never book a connection shorter than forty minutes for a user "
                "travelling with luggage or children on any European rail network.",
                "tags": ["cut"],
                "semantic_weight": 0.9,
                "provenance": {"source_id": "policy:rail", "trust": 0.95, "verified": True},
            }
        ),
        declared(
            {
                "type": "preference",
                "content": "The user likes green tea.",
                "tags": ["pin"],
                "semantic_weight": 0.2,
            }
        ),
    )
    (warm,) = publish(
        ACME,
        declared(
            {
                "type": "preference",
                "key": "seat",
                "value": "aisle",
                "tags": ["pin"],
                "semantic_weight": 0.7,
            }
        ),
    )
    idle, brief = publish(
        ACME,
        declared({"type": "fact", "content": "The user's office is in Lyon."}, "user:U2"),
        declared(
            {"type": "context", "scope": "session", "content": "On a call.", "ttl_seconds": 60},
            "user:U2",
        ),
    )
    (other,) = publish(
        GLOBEX, declared({"type": "fact", "content": "Globex keeps its own secrets."})
    )

    def assemble(template: str) -> str:
        clock.advance(timedelta(seconds=1))
        request = ContextRequest(
            subjects=("user:U1",), template=template, budget=3000, allow_constraint_drop=True
        )
        request_id = mnemo.context(ACME, request).request_id
        drain()
        return request_id

    def cite(request_id: str, *memory_ids: str) -> None:
        refs = "".join(f'<memory_ref id="{m}"/>' for m in memory_ids)
        mnemo.report(ACME, request_id, f"Here is what I know. {refs}")
        drain()

    contexts = {name: assemble(t) for name, t in (("r1", "roomy"), ("r2", "roomy"))}
    contexts |= {name: assemble(t) for name, t in (("t1", "tight"), ("t2", "tight"))}
    cite(contexts["r1"], hot, warm)
    cite(contexts["r2"], hot, warm)
    cite(contexts["t1"], warm)
    mnemo.report(
        ACME,
        contexts["r2"],
        "You like green tea.",
        correction="I stopped drinking tea",
        corrected_ids=[tea],
    )
    drain()

    # two rejections: already expired, and a stale expected version
    rejected = mnemo.publish(
        ACME,
        [
            declared(
                {
                    "type": "fact",
                    "content": "The user had a cold.",
                    "valid_until": (clock.now() - timedelta(days=1)).isoformat(),
                }
            ),
            declared(
                {"type": "preference", "key": "seat", "value": "middle", "expected_version": 1}
            ),
        ],
    )
    drain()
    clock.advance(timedelta(minutes=2))  # the session context's minute is over
    drain()
    return Seeded(
        ids={
            "hot": hot,
            "warm": warm,
            "seat_v1": seat_v1,
            "cool": cool,
            "rule": rule,
            "tea": tea,
            "idle": idle,
            "brief": brief,
        },
        contexts=contexts,
        other=other,
        rejected=[a.event_id for a in rejected.accepted],
    )


def open_platform(data: Path, clock: FixedClock) -> Platform:
    built = build_embedded(
        MnemoSettings(data_dir=data, embedder="hashing", sqlite_synchronous="NORMAL"),
        clock=clock,
    )
    install_keys(built, *TEST_TENANTS)
    return built


@dataclass(frozen=True)
class World:
    platform: Platform
    seeded: Seeded
    client: TestClient


@pytest.fixture(scope="module")
def world(tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    """One seeded Mnemo for the tests that only read."""
    clock = FixedClock(T0)
    platform = open_platform(tmp_path_factory.mktemp("console") / "data", clock)
    try:
        seeded = seed(platform, clock)
        with TestClient(create_app(platform, run_consumers=False)) as client:
            yield World(platform, seeded, client)
    finally:
        platform.close()


@pytest.fixture
def fresh(platform: Platform, clock: FixedClock) -> Iterator[World]:
    """A seeded Mnemo of its own, for a test that changes it."""
    seeded = seed(platform, clock)
    with TestClient(create_app(platform, run_consumers=False)) as client:
        yield World(platform, seeded, client)


def get(client: TestClient, path: str, headers: dict[str, str] = H, **params: Any) -> Any:
    r = client.get(path, params=params, headers=headers)
    assert r.status_code == 200, r.text
    return r.json()


# ---- the colour rule ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cited", "truncated", "included", "heat"),
    [
        (0, 0, 0, Heat.NEUTRAL),
        (2, 2, 2, Heat.HOT),
        (5, 4, 10, Heat.HOT),  # cited in half of its inclusions, cut in 4 of 14 appearances
        (2, 0, 4, Heat.WARM),  # exactly half of the inclusions
        (2, 0, 5, Heat.NEUTRAL),  # cited twice, but in under half of its inclusions
        (1, 0, 1, Heat.NEUTRAL),  # a single citation is not "often"
        (0, 2, 2, Heat.COOL),
        (0, 2, 6, Heat.COOL),  # 2 of 8 appearances: exactly 25%
        (0, 2, 7, Heat.NEUTRAL),  # 2 of 9 appearances: under 25%
        (3, 1, 3, Heat.WARM),  # one cut is not "often"
        (0, 5, 100, Heat.NEUTRAL),  # cut 5 times in 105 appearances: under 25%
    ],
)
def test_heat_rule(cited: int, truncated: int, included: int, heat: Heat) -> None:
    assert heat_of(cited, truncated, included) is heat


def test_the_css_paints_each_class_in_the_colour_the_api_names() -> None:
    css = (CONSOLE_DIR / "console.css").read_text()
    for heat, colour in HEAT_COLOURS.items():
        assert re.search(rf"--{heat.value}:\s*{colour};", css), heat


# ---- heat map --------------------------------------------------------------------------------


def test_heatmap_counts_and_classes(world: World) -> None:
    client, seeded = world.client, world.seeded
    data = get(client, "/v1/insights/heatmap")
    cells = {c["memory_id"]: c for c in data["cells"]}
    assert set(cells) == {seeded.ids[n] for n in EXPECTED}, "active memories of the tenant"
    for name, (included, truncated, cited, heat) in EXPECTED.items():
        c = cells[seeded.ids[name]]
        assert (c["included"], c["truncated"], c["cited"], c["heat"]) == (
            included,
            truncated,
            cited,
            heat.value,
        ), name
        assert c["appearances"] == included + truncated
    assert data["totals"] == {"hot": 1, "warm": 1, "cool": 2, "neutral": 2}
    assert {x["heat"]: x["colour"] for x in data["legend"]} == {
        h.value: c for h, c in HEAT_COLOURS.items()
    }
    assert data["rule"]["min_cited"] == 2
    assert data["rule"]["truncated_share"] == 0.25
    hot = cells[seeded.ids["hot"]]
    assert (hot["cited_rate"], hot["truncated_rate"]) == (1.0, 0.5)
    tea = cells[seeded.ids["tea"]]
    assert tea["corrected"] == 1
    rule = cells[seeded.ids["rule"]]
    assert (rule["type"], rule["scope"], rule["trust"], rule["verified"]) == (
        "constraint",
        "tenant",
        0.95,
        True,
    )
    assert rule["freshness"] == 1.0
    assert rule["stale"] is False
    assert 0 < hot["weight"] <= 0.99
    assert cells[seeded.ids["warm"]]["label"] == "seat: aisle"

    subject = get(client, "/v1/insights/heatmap", subject="user:U1")
    assert subject["subject"] == "user:U1"
    assert len(subject["cells"]) == 5
    assert {c["stream"] for c in subject["cells"]} == {"user:U1"}

    everything = get(client, "/v1/insights/heatmap", include_inactive="true")
    statuses = {c["memory_id"]: c["status"] for c in everything["cells"]}
    assert len(statuses) == 8
    assert statuses[seeded.ids["seat_v1"]] == "superseded"
    assert statuses[seeded.ids["brief"]] == "expired"

    first = get(client, "/v1/insights/heatmap", limit=4)
    assert len(first["cells"]) == 4
    assert first["next_after"]
    rest = get(client, "/v1/insights/heatmap", limit=4, after=first["next_after"])
    assert len(rest["cells"]) == 2
    assert rest["next_after"] is None

    bad = client.get("/v1/insights/heatmap", params={"subject": "no spaces!"}, headers=H)
    assert (bad.status_code, bad.json()["error"]["code"]) == (400, "INVALID_STREAM")


# ---- a memory's life ---------------------------------------------------------------------------


def test_a_memorys_life(world: World) -> None:
    client, seeded = world.client, world.seeded
    hot = get(client, f"/v1/insights/memories/{seeded.ids['hot']}/life")
    whats = [e["what"] for e in hot["timeline"]]
    assert whats[0] == "registered"
    assert whats.count("in_context") == 2
    assert whats.count("truncated") == 2
    assert whats.count("cited") == 2
    assert "decayed" in whats, "a citation moves the weight"
    offsets = [e["offset"] for e in hot["timeline"]]
    assert offsets == sorted(offsets)
    assert [v["memory_id"] for v in hot["versions"]] == [seeded.ids["hot"]]
    roles = {u["context"]["request_id"]: u["role"] for u in hot["contexts"]}
    c = seeded.contexts
    assert roles == {
        c["r1"]: "included",
        c["r2"]: "included",
        c["t1"]: "truncated",
        c["t2"]: "truncated",
    }
    assert hot["cell"]["heat"] == "hot"

    warm = get(client, f"/v1/insights/memories/{seeded.ids['warm']}/life")
    assert [(v["memory_id"], v["status"], v["version"]) for v in warm["versions"]] == [
        (seeded.ids["seat_v1"], "superseded", 1),
        (seeded.ids["warm"], "active", 2),
    ]
    assert warm["timeline"][0]["what"] == "superseding"
    old = get(client, f"/v1/insights/memories/{seeded.ids['seat_v1']}/life")
    assert "superseded" in [e["what"] for e in old["timeline"]]

    tea = get(client, f"/v1/insights/memories/{seeded.ids['tea']}/life")
    corrected = [e for e in tea["timeline"] if e["what"] == "corrected"]
    assert [e["detail"] for e in corrected] == ["I stopped drinking tea"]

    brief = get(client, f"/v1/insights/memories/{seeded.ids['brief']}/life")
    assert [e["what"] for e in brief["timeline"]] == ["registered", "expired"]
    assert brief["memory"]["status"] == "expired"
    assert brief["contexts"] == []

    missing = client.get("/v1/insights/memories/nope/life", headers=H)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "MEMORY_NOT_FOUND")


# ---- contexts ---------------------------------------------------------------------------------


def test_contexts_and_the_inspector(world: World) -> None:
    client, seeded = world.client, world.seeded
    listed = get(client, "/v1/insights/contexts")["contexts"]
    c = seeded.contexts
    assert [x["request_id"] for x in listed] == [c["t2"], c["t1"], c["r2"], c["r1"]]
    by_id = {x["request_id"]: x for x in listed}
    assert (by_id[c["r1"]]["included"], by_id[c["r1"]]["truncated"]) == (5, 0)
    assert (by_id[c["t1"]]["included"], by_id[c["t1"]]["truncated"]) == (2, 3)
    assert by_id[c["r1"]]["answered"]
    assert not by_id[c["t2"]]["answered"]
    assert by_id[c["t1"]]["template"] == "tight@1"
    page = get(client, "/v1/insights/contexts", limit=3)
    assert len(page["contexts"]) == 3
    tail = get(client, "/v1/insights/contexts", limit=3, before=page["next_before"])
    assert [x["request_id"] for x in tail["contexts"]] == [c["r1"]]

    tight = get(client, f"/v1/insights/contexts/{c['t1']}")
    ids = seeded.ids
    assert [(p["memory_id"], p["section"]) for p in tight["included"]] == [
        (ids["warm"], "pinned"),
        (ids["tea"], "pinned"),
    ]
    reasons = {p["memory_id"]: p["reason"] for p in tight["left_out"]}
    assert reasons == {
        ids["hot"]: "budget",
        ids["cool"]: "budget",
        ids["rule"]: "budget",
        ids["seat_v1"]: "superseded",
    }
    rendered = tight["rendered"]
    assert rendered.startswith("[MNEMO-CONTEXT v1 | fp:")
    assert "seat: aisle" in rendered
    assert "green tea" in rendered
    assert "travel diary" not in rendered
    labels = {p["memory_id"]: p["label"] for p in tight["left_out"]}
    assert "travel diary" in labels[ids["hot"]]
    assert tight["summary"]["budget"] == 3000
    assert tight["summary"]["tokens"] > 0

    missing = client.get("/v1/insights/contexts/nope", headers=H)
    assert (missing.status_code, missing.json()["error"]["code"]) == (404, "CONTEXT_NOT_FOUND")


# ---- events, rejections, dead letters ------------------------------------------------------------


def test_event_tail_with_filters(fresh: World) -> None:
    client, platform, seeded = fresh.client, fresh.platform, fresh.seeded
    latest = get(client, "/v1/insights/events", limit=5)
    assert len(latest["events"]) == 5
    offsets = [e["offset"] for e in latest["events"]]
    assert offsets == sorted(offsets)
    assert offsets[-1] == platform.log.head()
    assert latest["next"] == platform.log.head()

    assembled = get(client, "/v1/insights/events", type="ContextAssembled")["events"]
    assert [e["event_id"] for e in assembled] == [
        seeded.contexts[n] for n in ("r1", "r2", "t1", "t2")
    ]
    both = get(client, "/v1/insights/events", type=["MemoryCited", "MemoryCorrected"])["events"]
    assert sorted({e["type"] for e in both}) == ["MemoryCited", "MemoryCorrected"]
    assert len(both) == 6
    u2 = get(client, "/v1/insights/events", stream="user:U2")["events"]
    assert u2
    assert {e["stream"] for e in u2} == {"user:U2"}
    bad = client.get("/v1/insights/events", params={"stream": "bad stream"}, headers=H)
    assert bad.status_code == 400
    assert bad.json()["error"]["code"] == "INVALID_STREAM"
    seeder = get(client, "/v1/insights/events", actor="seeder", type="MemoryDeclared")["events"]
    assert len(seeder) == 10  # globex's own declaration is not acme's

    # from the start, one page at a time, then tailing what arrives next
    pages, after = [], 0
    while True:
        page = get(client, "/v1/insights/events", after_offset=after, limit=40)
        if not page["events"]:
            break
        pages.extend(e["offset"] for e in page["events"])
        after = page["next"]
    everything = [e.offset for e in platform.log.read_tenant("acme", 0, 10_000)]
    assert pages == everything
    platform.app.publish(ACME, [declared({"type": "fact", "content": "A new fact."})])
    fresh = get(client, "/v1/insights/events", after_offset=after)
    assert [e["type"] for e in fresh["events"]] == ["MemoryDeclared"]
    assert fresh["events"][0]["actor"] == "seeder"


def test_rejections_and_dead_letters(world: World) -> None:
    client, seeded = world.client, world.seeded
    data = get(client, "/v1/insights/rejections")
    assert data["complete"] is True
    got = [(r["event_id"], r["reason_code"]) for r in data["rejections"]]
    assert got == [
        (seeded.rejected[1], "VERSION_CONFLICT"),
        (seeded.rejected[0], "ALREADY_EXPIRED"),
    ]
    assert all(r["event_type"] == "MemoryDeclared" for r in data["rejections"])
    assert all(r["detail"] for r in data["rejections"])
    assert len(get(client, "/v1/insights/rejections", limit=1)["rejections"]) == 1
    assert get(client, "/v1/insights/dead-letters") == []


# ---- audit ------------------------------------------------------------------------------------


def test_audit_chain_verification_and_tampering(fresh: World, tmp_path: Path) -> None:
    client, platform = fresh.client, fresh.platform
    events = platform.log.read_tenant("acme", 0, 10_000)
    audit = get(client, "/v1/insights/audit")
    assert audit["status"] == "intact"
    assert audit["links"] == len(events)
    assert audit["pending"] == 0
    assert audit["first_broken"] is None
    assert len(audit["head_hash"]) == 64
    assert audit["last_offset"] == events[-1].offset

    platform.app.publish(ACME, [declared({"type": "fact", "content": "Not audited yet."})])
    assert get(client, "/v1/insights/audit")["pending"] == 1
    platform.runner.drain()
    assert get(client, "/v1/insights/audit")["status"] == "intact"

    assert audit["streams"] == len({e.envelope.stream for e in events})

    # break link 3 of the first stream that has one: the streams before it verify whole
    heads = platform.store.audit_heads("acme")
    target = next(h for h in heads if h.n >= 3)
    before = sum(h.n for h in heads if h.stream < target.stream)
    store = tmp_path / "data" / "store.sqlite3"
    with sqlite3.connect(store) as db:
        db.execute(
            "UPDATE audit_links SET hash = ? WHERE tenant = 'acme' AND stream = ? AND n = 3",
            ("f" * 64, target.stream),
        )
    broken = get(client, "/v1/insights/audit")
    assert broken["status"] == "broken"
    assert broken["first_broken"] == 3
    assert broken["stream"] == target.stream
    assert broken["links"] == before + 2
    assert f"{target.stream} link 3" in broken["reason"]
    assert get(client, "/v1/insights/audit", headers=OTHER)["status"] == "intact"


@pytest.mark.parametrize("cut", ["tail", "whole"])
def test_links_deleted_from_the_end_of_a_chain_are_found(
    fresh: World, tmp_path: Path, cut: str
) -> None:
    """Removing a stream's last links (or its whole chain) leaves a chain that verifies on
    its own; the events the audit consumer had passed without a link give it away."""
    client, platform = fresh.client, fresh.platform
    assert get(client, "/v1/insights/audit")["status"] == "intact"
    heads = platform.store.audit_heads("acme")
    target = max(heads, key=lambda h: h.n)
    keep = target.n - 1 if cut == "tail" else 0
    with sqlite3.connect(tmp_path / "data" / "store.sqlite3") as db:
        db.execute(
            "DELETE FROM audit_links WHERE tenant = 'acme' AND stream = ? AND n > ?",
            (target.stream, keep),
        )
    broken = get(client, "/v1/insights/audit")
    assert broken["status"] == "broken"
    assert broken["stream"] == target.stream
    assert broken["first_broken"] == keep + 1
    assert "has no link" in broken["reason"]
    assert broken["pending"] == 0


# ---- tenant isolation --------------------------------------------------------------------------


def test_another_tenant_sees_nothing(world: World) -> None:
    client, platform, seeded = world.client, world.platform, world.seeded
    theirs = get(client, "/v1/insights/heatmap", headers=OTHER)
    assert [c["memory_id"] for c in theirs["cells"]] == [seeded.other]
    for name in ("hot", "warm"):
        r = client.get(f"/v1/insights/memories/{seeded.ids[name]}/life", headers=OTHER)
        assert r.status_code == 404
    assert client.get(f"/v1/insights/memories/{seeded.other}/life", headers=H).status_code == 404
    assert get(client, "/v1/insights/contexts", headers=OTHER)["contexts"] == []
    r = client.get(f"/v1/insights/contexts/{seeded.contexts['r1']}", headers=OTHER)
    assert r.status_code == 404
    their_events = get(client, "/v1/insights/events", headers=OTHER, limit=1000)["events"]
    globex = [e.envelope.event_id for e in platform.log.read_tenant("globex", 0, 1000)]
    assert [e["event_id"] for e in their_events] == globex
    assert len(globex) == 2  # its declaration and its registration
    assert get(client, "/v1/insights/rejections", headers=OTHER)["rejections"] == []
    audit = get(client, "/v1/insights/audit", headers=OTHER)
    assert audit["status"] == "intact"
    assert audit["links"] == len(their_events)
    assert client.get("/v1/insights/heatmap").status_code == 401  # no API key


# ---- the page and the API description ------------------------------------------------------------


def test_the_console_is_served_from_mnemo_itself(world: World) -> None:
    client = world.client
    page = client.get("/console")
    assert page.status_code == 200
    assert page.headers["content-type"].startswith("text/html")
    csp = page.headers["content-security-policy"]
    assert "default-src 'none'" in csp
    assert "script-src 'self'" in csp
    html = page.text
    assert not re.search(r"(src|href)=\"(https?:)?//", html), "no asset from elsewhere"
    for asset, kind in (
        ("console.js", "text/javascript"),
        ("console.css", "text/css"),
        ("icon.svg", "image/svg+xml"),
    ):
        assert f"/console/{asset}" in html
        r = client.get(f"/console/{asset}")
        assert r.status_code == 200
        assert r.headers["content-type"].startswith(kind)
        text = r.text.replace('xmlns="http://www.w3.org/2000/svg"', "")
        assert "http://" not in text
        assert "https://" not in text
        assert "@import" not in text
    assert client.get("/console/secrets.txt").status_code == 404
    redirect = client.get("/console/?tenant=acme", follow_redirects=False)
    assert redirect.status_code == 307
    assert redirect.headers["location"] == "/console?tenant=acme"
    # a key pasted into the query is not handed back in the Location (nor anything the
    # page does not read); what it reads is kept, encoded
    pasted = client.get(
        "/console/?key=mk_live_pasted&principal=ann+lee&subject=user%3Abob&x=1",
        follow_redirects=False,
    )
    assert pasted.status_code == 307
    assert pasted.headers["location"] == "/console?principal=ann+lee&subject=user%3Abob"
    assert "mk_live_pasted" not in str(pasted.headers)
    # nor a key pasted as the value of a parameter the page reads
    key = "mnemo_0123456789abcdef_" + "k" * 43
    as_value = client.get(f"/console/?principal={key}&subject=user%3Abob", follow_redirects=False)
    assert as_value.headers["location"] == "/console?subject=user%3Abob"


def test_every_insight_endpoint_is_documented(world: World) -> None:
    client = world.client
    paths = client.get("/openapi.json").json()["paths"]
    insights = {p: v for p, v in paths.items() if p.startswith("/v1/insights/")}
    assert set(insights) == {
        "/v1/insights/heatmap",
        "/v1/insights/memories/{memory_id}/life",
        "/v1/insights/contexts",
        "/v1/insights/contexts/{request_id}",
        "/v1/insights/events",
        "/v1/insights/rejections",
        "/v1/insights/dead-letters",
        "/v1/insights/audit",
    }
    for path, item in insights.items():
        assert item["get"]["summary"], path
        assert item["get"]["tags"] == ["insights"], path
    assert not any(p.startswith("/console") for p in paths)


def test_an_audit_key_without_memory_read_sees_no_event_payloads(fresh: World) -> None:
    """A key holding audit:read alone is refused memories, search and the log
    (memory:read), yet it once read every event's payload, opened (a user's words, their
    phone numbers and passwords), through the console's event stream."""
    install_keys(fresh.platform, "acme", label="auditor", scopes=("audit:read",))
    auditor = headers_for("acme", "auditor", label="auditor")
    assert fresh.client.get("/v1/events", headers=auditor).status_code == 403
    seen = fresh.client.get("/v1/insights/events", params={"limit": 1000}, headers=auditor)
    assert seen.status_code == 200, seen.text
    events = seen.json()["events"]
    assert events
    assert all(e["payload"] is None for e in events)
    assert {e["type"] for e in events} >= {"MemoryDeclared", "MemoryRegistered"}
    # the console's key (memory:read and audit:read) still reads them
    full = fresh.client.get("/v1/insights/events", params={"limit": 1000}, headers=H).json()
    assert all(isinstance(e["payload"], dict) for e in full["events"])
    assert [e["event_id"] for e in full["events"]] == [e["event_id"] for e in events]
