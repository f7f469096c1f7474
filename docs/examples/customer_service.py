"""A customer-service agent that keeps a customer's preferences across sessions, in Chinese
and in English.

Each session is a new client, as a new conversation (or a new process) would be. What
the customer says is recorded as observations; Mnemo's registration rules decide what
to keep (`记住我的尺码是L` becomes the preference size=L). The next session starts from
a context of what is known, and a changed preference supersedes the old one, with its
history kept.

    python docs/examples/customer_service.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import os

from mnemo.client import ContextResponse, MnemoClient

CUSTOMER = "user:C1024"


def known(context: ContextResponse) -> dict[str, str]:
    """The key=value preferences a context holds."""
    return {
        i.memory.key: i.memory.value or ""
        for i in context.included
        if i.memory.key and i.memory.type == "preference"
    }


def session_one(mnemo: MnemoClient) -> None:
    """First visit, in Chinese and English; the agent only listens."""
    said = [
        "你好，我想买衬衫。记住我的尺码是L",
        "我不要红色，太显眼了",
        "Also, remember that my favourite color is navy blue.",
        "谢谢！",
    ]
    for text in said:
        result = mnemo.observe(CUSTOMER, text, timezone="Asia/Shanghai", wait="indexed")
        outcome = result.outcomes[0]
        if outcome.memory_id:
            memory = mnemo.get(outcome.memory_id)
            print(f"session 1: {text!r} -> remembered {memory.key} = {memory.value}")
        else:
            print(f"session 1: {text!r} -> nothing to remember ({outcome.reason_code})")


def session_two(mnemo: MnemoClient) -> None:
    """A week later, in English: the agent starts from what it knows."""
    context = mnemo.context([CUSTOMER], "recommend a winter jacket", budget=300)
    prefs = known(context)
    print(f"session 2: knows {', '.join(f'{k} = {v}' for k, v in sorted(prefs.items()))}")
    # each thing disliked is its own preference (dislike.红色), so several stand together
    avoided = sorted(v for k, v in prefs.items() if k.startswith("dislike."))
    print(
        f"session 2: agent: How about a {prefs['favourite_color']} jacket in size "
        f"{prefs['size']}? Nothing in {', '.join(avoided)}."
    )
    result = mnemo.observe(CUSTOMER, "Thanks, but my size is XL now.", wait="indexed")
    outcome = result.outcomes[0]
    print(f"session 2: size is now XL ({outcome.outcome}, version {outcome.version})")


def session_three(mnemo: MnemoClient) -> None:
    """Back in Chinese: the newest size wins, and the old one is history."""
    context = mnemo.context([CUSTOMER], "推荐一件外套", budget=300)
    prefs = known(context)
    print(f"session 3: 客服: 为您推荐{prefs['favourite_color']}的外套，尺码{prefs['size']}。")
    versions = mnemo.history(CUSTOMER, "size")
    print("session 3: size history: " + " -> ".join(f"{m.value} ({m.status})" for m in versions))


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
    for session in (session_one, session_two, session_three):
        with MnemoClient(
            args.url, tenant=args.tenant, principal="service-agent", api_key=args.api_key
        ) as mnemo:
            session(mnemo)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
