"""A sales assistant whose memory and tools work together.

1. The assistant remembers a client's stage: a proposal was sent two days ago.
2. Asking for a context, it gets a suggested tool call with it: the operator's trigger
   (docs/examples/sales_triggers.yaml) says a proposal older than a day calls for a look
   at the deal in the CRM.
3. It makes the call (a stand-in CRM here) and records the result, quoting the
   suggestion: the result becomes a memory (provenance tool:crm.get_deal), and the
   suggestion stops firing for that memory version.
4. It also records an exchange rate that is fresh for a minute, and shows that a context
   judged after that minute leaves the rate out instead of showing it as fresh.
5. It drafts a follow-up from what the context shows.

The server must run with MNEMO_TRIGGERS_FILE=docs/examples/sales_triggers.yaml.

    python docs/examples/sales_assistant.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import os
from datetime import UTC, datetime, timedelta, timezone
from typing import Any

from mnemo.client import MnemoClient

CLIENT = "user:client-acme-gmbh"
BERLIN = timezone(timedelta(hours=1))  # the assistant's own clock reads Berlin time


def crm_get_deal(client: str) -> dict[str, Any]:
    """A stand-in for the CRM's API."""
    return {"client": client, "stage": "negotiation", "last_activity": "call booked for Friday"}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--url", default="http://127.0.0.1:8080")
    parser.add_argument("--api-key", default=os.environ.get("MNEMO_API_KEY"))
    args = parser.parse_args()
    with MnemoClient(args.url, api_key=args.api_key, principal="sales-assistant") as mnemo:
        # 1. the stage, as remembered when the proposal went out two days ago
        sent = datetime.now(UTC) - timedelta(days=2)
        event = {
            "type": "MemoryDeclared",
            "schema_version": 1,
            "stream": CLIENT,
            "occurred_at": sent.isoformat(),
            "payload": {"memory": {"type": "fact", "key": "stage", "value": "proposal_sent"}},
        }
        [stage_id] = [o.memory_id for o in mnemo.publish(event, wait="registered").outcomes]
        print("remembered: stage = proposal_sent (2 days ago)")

        # 2. the context comes with a suggested call
        context = mnemo.context(CLIENT, "follow up on the proposal", budget=600)
        [suggestion] = context.suggestions
        assert suggestion.memory_id == stage_id
        print(
            f"suggested: {suggestion.tool}({suggestion.arguments}) by trigger "
            f"{suggestion.trigger_id}, fired by stage v{suggestion.memory_version}"
        )

        # 3. the assistant takes it: calls the CRM and records the result with the reference
        deal = crm_get_deal(**suggestion.arguments)
        recorded = mnemo.record_tool_result(
            CLIENT,
            suggestion.tool,
            deal,
            arguments=suggestion.arguments,
            source="crm.example.com",
            fresh_for_seconds=3600,
            key="crm.deal",
            trigger=suggestion.trigger,
            wait="indexed",
        )
        memory = mnemo.get(recorded.memory_id or "")
        print(f"recorded: {memory.key} from {memory.provenance.source_id} (fresh for 1h)")
        print(f"suggestions now: {len(mnemo.suggestions(CLIENT).suggestions)}")

        # 4. an exchange rate, fetched 50 s ago on the assistant's Berlin clock, fresh for 60 s
        fetched = datetime.now(BERLIN) - timedelta(seconds=50)
        mnemo.record_tool_result(
            CLIENT,
            "fx.rate",
            {"pair": "EUR/USD", "rate": 1.08},
            arguments={"pair": "EUR/USD"},
            source="ecb",
            fetched_at=fetched,
            fresh_for_seconds=60,
            wait="indexed",
        )
        fresh = mnemo.context(
            CLIENT, "exchange rate", budget=600, as_of=fetched + timedelta(seconds=59)
        )
        stale = mnemo.context(
            CLIENT, "exchange rate", budget=600, as_of=fetched + timedelta(seconds=60)
        )
        print(f"rate at 59 s: {'shown' if 'fx.rate' in fresh.context else 'missing'}")
        print(f"rate at 60 s: {'shown' if 'fx.rate' in stale.context else 'left out'}")

        # 5. the follow-up, from what the context shows now
        context = mnemo.context(CLIENT, "follow up on the proposal", budget=600)
        lines = [line for line in context.context.splitlines() if "crm.get_deal" in line]
        print("context line: " + lines[0].split(" -> ")[-1])
        print(
            f"draft: Hi! Following up on our proposal: I see {deal['last_activity']}; "
            "looking forward to it."
        )


if __name__ == "__main__":
    main()
