"""Two agents, a planner and an executor, sharing one tenant's memory.

The planner writes the plan where both agents look (the subject `project:website-launch`,
scope `tenant`) and keeps a working note in its own subject (`agent:planner`, scope
`agent`). The executor reads the plan through a context, searches only the shared
memories, records its progress for the planner, and keeps its own notes apart.

The tenant is the boundary: both agents can read anything in it. The subject a memory
lives in and its scope are how agents keep their own memories apart from the shared
ones, and how they filter.

    python docs/examples/planner_executor.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import os

from mnemo.client import MnemoClient

SHARED = "project:website-launch"
PLANNER = "agent:planner"
EXECUTOR = "agent:executor"
PLAN = [
    "Write the release notes for version 2.4",
    "Run the load test against staging",
    "Switch the DNS records to the new site",
]


def plan(planner: MnemoClient) -> None:
    planner.remember(SHARED, "Never deploy on a Friday", type="constraint", scope="tenant")
    for n, step in enumerate(PLAN, 1):
        planner.remember(
            SHARED, type="context", key=f"step.{n}", value=step, scope="tenant", tags=["plan"]
        )
    planner.remember(
        PLANNER,
        "The executor skipped the load test last time: check it before the DNS switch",
        type="episode",
        scope="agent",
        wait="indexed",  # searchable as soon as this returns
    )
    print(f"planner: shared {len(PLAN)} plan steps and 1 constraint in {SHARED} (scope tenant)")
    print(f"planner: kept 1 private note in {PLANNER} (scope agent)")


def keyed(client: MnemoClient, prefix: str) -> dict[str, str]:
    """The shared memories whose key starts with `prefix`, by the rest of the key."""
    return {
        m.key.removeprefix(prefix): m.value or ""
        for m in client.list(SHARED).memories
        if m.key and m.key.startswith(prefix)
    }


def execute(executor: MnemoClient) -> None:
    context = executor.context([SHARED, EXECUTOR], "what is the next step of the plan?")
    print("executor: context from shared memory:")
    for line in context.context.splitlines()[1:]:  # the first line is the protocol header
        print(f"  | {line}")

    steps, done = keyed(executor, "step."), keyed(executor, "status.")
    step = min(n for n in steps if n not in done)
    print(f"executor: next step -> {steps[step]}")

    shared = executor.search("load test", scopes=["tenant"]).hits
    everywhere = executor.search("load test").hits
    print(f"executor: 'load test' among shared memories: {shared[0].memory.text()}")
    others = [h.memory.stream for h in everywhere if h.memory.scope == "agent"]
    print(f"executor: across the whole tenant it also finds a note in {others[0]}")

    executor.remember(
        EXECUTOR, "Release notes drafted in docs/release-2.4.md", type="episode", scope="agent"
    )
    executor.remember(SHARED, type="context", key=f"status.{step}", value="done", scope="tenant")
    print(f"executor: marked step {step} done in {SHARED}")


def review(planner: MnemoClient) -> None:
    authors = {e.event_id: e.actor.id for e in planner.replay(SHARED).events}
    for status in planner.list(SHARED).memories:
        if status.key and status.key.startswith("status."):
            by = authors[status.source_event_id]
            print(f"planner: sees {status.key} = {status.value} (written by {by})")
    mine, theirs = planner.list(PLANNER).memories, planner.list(EXECUTOR).memories
    print(f"planner: {PLANNER} holds {len(mine)} note, {EXECUTOR} holds {len(theirs)}")


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
    with (
        MnemoClient(
            args.url, tenant=args.tenant, principal="planner", api_key=args.api_key
        ) as planner,
        MnemoClient(
            args.url, tenant=args.tenant, principal="executor", api_key=args.api_key
        ) as executor,
    ):
        plan(planner)
        execute(executor)
        review(planner)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
