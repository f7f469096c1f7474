"""The runnable examples in docs/examples, each against a real Mnemo server, checked by
what they print."""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from tests.support import fixed_key, install_keys, running_server

from mnemo.service.triggers import load_triggers

TENANTS = ("ex-launch", "ex-shop", "ex-travel", "ex-pay", "ex-sales")
EXAMPLES = Path(__file__).resolve().parents[2] / "docs" / "examples"


@pytest.fixture(scope="module")
def server_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A real server (embedded platform, gateway, uvicorn) on a free port, in a thread."""
    with running_server(tmp_path_factory.mktemp("server")) as (url, platform):
        install_keys(platform, *TENANTS)
        # as MNEMO_TRIGGERS_FILE=docs/examples/sales_triggers.yaml would load them
        platform.app.triggers = load_triggers(EXAMPLES / "sales_triggers.yaml")
        yield url


def run_example(name: str, url: str, tenant: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / name), "--url", url, "--api-key", fixed_key(tenant)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()


def test_every_example_is_tested() -> None:
    tested = {
        "planner_executor.py",
        "customer_service.py",
        "citing_agent.py",
        "payment_toolchain.py",
        "sales_assistant.py",
    }
    assert {p.name for p in EXAMPLES.glob("*.py")} == tested


def test_planner_and_executor_share_a_tenant(server_url: str) -> None:
    out = run_example("planner_executor.py", server_url, "ex-launch")
    assert out[0] == (
        "planner: shared 3 plan steps and 1 constraint in project:website-launch (scope tenant)"
    )
    context = [line for line in out if line.startswith("  | ")]
    assert context[:2] == ["  | ## Constraints", "  | - Never deploy on a Friday"]
    assert not any("skipped the load test" in line for line in context)  # the planner's own
    assert "executor: next step -> Write the release notes for version 2.4" in out
    assert (
        "executor: 'load test' among shared memories: step.2: Run the load test against staging"
        in out
    )
    assert "executor: across the whole tenant it also finds a note in agent:planner" in out
    assert "planner: sees status.1 = done (written by executor)" in out
    assert out[-1] == "planner: agent:planner holds 1 note, agent:executor holds 1"


def test_customer_service_keeps_preferences_across_sessions(server_url: str) -> None:
    out = run_example("customer_service.py", server_url, "ex-shop")
    assert out[:4] == [
        "session 1: '你好，我想买衬衫。记住我的尺码是L' -> remembered size = L",
        "session 1: '我不要红色，太显眼了' -> remembered dislike.红色 = 红色",
        "session 1: 'Also, remember that my favourite color is navy blue.' "
        "-> remembered favourite_color = navy blue",
        "session 1: '谢谢！' -> nothing to remember (NO_RULE_MATCHED)",
    ]
    assert "session 2: knows dislike.红色 = 红色, favourite_color = navy blue, size = L" in out
    assert "session 2: agent: How about a navy blue jacket in size L? Nothing in 红色." in out
    assert "session 2: size is now XL (superseded, version 2)" in out
    assert "session 3: 客服: 为您推荐navy blue的外套，尺码XL。" in out
    assert out[-1] == "session 3: size history: L (superseded) -> XL (active)"


def test_citing_agent_moves_weights(server_url: str) -> None:
    out = run_example("citing_agent.py", server_url, "ex-travel")
    answer = out[0]
    assert answer.startswith("answer: You land at 14:05")
    assert len(re.findall(r'<memory_ref id="[0-9a-f-]+"/>', answer)) == 3
    cited = {line.split()[1] for line in out if line.startswith("cited: ")}
    assert cited == {"diet", "flight_arrival", "hotel"}
    assert "corrected: flight_arrival" in out
    weights = {}
    for line in out:
        found = re.match(r"weight (\w+): ([\d.]+) -> ([\d.]+) \(trust ([\d.]+) -> ([\d.]+)\)", line)
        if found:
            key, w0, w1, t0, t1 = found.groups()
            weights[key] = (float(w0), float(w1), float(t0), float(t1))
    assert set(weights) == {"diet", "flight_arrival", "hotel"}
    for key in ("diet", "hotel"):  # cited: more weight
        assert weights[key][1] > weights[key][0]
    before, after, trust_before, trust_after = weights["flight_arrival"]
    assert after < before  # cited, then corrected: less weight and less trust
    assert trust_after < trust_before
    assert out[-1] == "remembered flight_arrival = 16:30 at Narita (superseded, v2)"


def test_payment_toolchain_resumes_on_another_device_with_one_order(server_url: str) -> None:
    out = run_example("payment_toolchain.py", server_url, "ex-pay")
    assert out[:3] == [
        "laptop: started 3 steps, next create_order",
        "laptop: create_order done -> {'order_id': 'O-1000', 'amount_eur': 42}",
        "laptop: payment_link failed (the payment service did not answer)",
    ]
    assert out[3] == "phone: status failed, done ['create_order'], next payment_link"
    assert out[4] == "phone: order from before: O-1000"
    assert out[5] == "phone: step one recorded again -> duplicate=True"
    assert out[6] == "phone: another order for step one -> STEP_CONFLICT"
    assert out[7] == "phone: payment_link done -> {'url': 'https://pay.example/O-1000'}"
    assert out[8] == "phone: confirm_payment done -> {'paid': True, 'order_id': 'O-1000'}"
    assert out[9].startswith("phone: status completed, expires ")
    assert out[10] == "phone: read at its expiry it is still completed (it finished in time)"
    assert out[-1] == "shop: 1 order(s): O-1000"


def test_sales_assistant_takes_a_suggested_call_and_never_shows_a_stale_rate(
    server_url: str,
) -> None:
    out = run_example("sales_assistant.py", server_url, "ex-sales")
    assert out[0] == "remembered: stage = proposal_sent (2 days ago)"
    assert out[1] == (
        "suggested: crm.get_deal({'client': 'user:client-acme-gmbh'}) by trigger "
        "stale-proposal, fired by stage v1"
    )
    assert out[2] == "recorded: crm.deal from tool:crm.get_deal (fresh for 1h)"
    assert out[3] == "suggestions now: 0"  # answered: it no longer fires for that version
    assert out[4:6] == ["rate at 59 s: shown", "rate at 60 s: left out"]
    assert re.fullmatch(
        r'context line: \{"client":"user:client-acme-gmbh","last_activity":"call booked for '
        r'Friday","stage":"negotiation"\} .*\[crm\.get_deal result, fetched \d+s ago\]',
        out[6],
    ), out[6]
    assert out[7].startswith("draft: Hi! Following up on our proposal: I see call booked")
