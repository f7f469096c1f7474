"""An agent that cites the memories it uses, reports its answer, and takes a correction.

1. Mnemo holds a few facts about a traveller.
2. The agent asks for a context, and its (stand-in) model answers citing the memories it
   relied on with <memory_ref id="..."/>.
3. The agent reports the answer: the cited memories gain weight. The traveller corrects
   one fact, so that memory loses weight and trust, and the new value is remembered.
4. The script shows the weights before and after.

Weights move asynchronously (a consumer of the event log applies the feedback), so the
script polls until they have moved.

    python docs/examples/citing_agent.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import os
import time

from mnemo.client import ContextResponse, Memory, MnemoClient

TRAVELLER = "user:T88"
FACTS = {
    "diet": "vegetarian",
    "flight_arrival": "14:05 at Narita",
    "hotel": "Hotel Sakura in Shinjuku",
}


def model_answer(context: ContextResponse) -> str:
    """A stand-in for an LLM call: writes an answer from the context, citing each memory."""
    by_key = {i.memory.key: i.memory.memory_id for i in context.included}

    def ref(key: str) -> str:
        return f'<memory_ref id="{by_key[key]}"/>'

    return (
        f"You land at 14:05 at Narita {ref('flight_arrival')}, so take the Narita Express "
        f"to Shinjuku and check in at Hotel Sakura {ref('hotel')}. For dinner, try a "
        f"vegetarian izakaya nearby {ref('diet')}."
    )


def wait_for_weights(
    mnemo: MnemoClient, before: dict[str, Memory], up: set[str], down: set[str]
) -> dict[str, Memory]:
    """Poll until every memory in `up` gained weight and every one in `down` lost some."""
    deadline = time.monotonic() + 30
    while True:
        now = {mid: mnemo.get(mid) for mid in before}
        moved_up = all(now[m].semantic_weight > before[m].semantic_weight for m in up)
        moved_down = all(now[m].semantic_weight < before[m].semantic_weight for m in down)
        if moved_up and moved_down:
            return now
        if time.monotonic() > deadline:
            raise SystemExit("the weights did not move within 30 s")
        time.sleep(0.1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MNEMO_URL", "http://127.0.0.1:8080"))
    parser.add_argument(
        "--api-key",
        default=os.environ.get("MNEMO_API_KEY"),
        help="an API key with memory:read, memory:write and context (default: MNEMO_API_KEY)",
    )
    parser.add_argument("--tenant", default=None, help="must be the key's tenant, if given")
    args = parser.parse_args(argv)
    with MnemoClient(
        args.url, tenant=args.tenant, principal="travel-agent", api_key=args.api_key
    ) as mnemo:
        ids = {}
        for key, value in FACTS.items():
            result = mnemo.remember(TRAVELLER, type="fact", key=key, value=value, wait="indexed")
            ids[key] = result.memory_ids[0]

        context = mnemo.context([TRAVELLER], "plan the first evening in Tokyo", budget=400)
        answer = model_answer(context)
        print(f"answer: {answer}")
        before = {mid: mnemo.get(mid) for mid in ids.values()}

        feedback = mnemo.report(
            context.request_id,
            answer,
            correction="The flight was rescheduled: it lands at 16:30",
            corrected_memory_ids=[ids["flight_arrival"]],
        )
        names = {mid: key for key, mid in ids.items()}
        for cited in feedback.cited:
            print(f"cited: {names[cited.memory_id]} ({cited.position} of the answer)")
        print(f"corrected: {', '.join(names[m] for m in feedback.corrected)}")

        up = {m.memory_id for m in feedback.cited} - set(feedback.corrected)
        after = wait_for_weights(mnemo, before, up, set(feedback.corrected))
        for mid, old in before.items():
            new = after[mid]
            print(
                f"weight {names[mid]}: {old.semantic_weight:.2f} -> {new.semantic_weight:.2f}"
                f" (trust {old.provenance.trust:.2f} -> {new.provenance.trust:.2f})"
            )

        fixed = mnemo.remember(
            TRAVELLER, type="fact", key="flight_arrival", value="16:30 at Narita"
        )
        outcome = fixed.outcomes[0]
        print(
            f"remembered flight_arrival = 16:30 at Narita ({outcome.outcome}, v{outcome.version})"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
