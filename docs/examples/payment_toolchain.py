"""A payment toolchain that fails at step two and resumes on another device without
creating a second order.

1. The laptop plans three tool calls for a customer (create order -> payment link ->
   confirm payment) and runs them, recording each outcome in Mnemo.
2. The payment service is down: step two fails (retryable).
3. The laptop is gone. The phone asks Mnemo for the toolchain's state, sees that the order
   exists (with its id) and that the payment link is next, and carries on from there.
4. A nervous retry of step one with the same output is recorded once; a different order
   for the same step is refused (STEP_CONFLICT). The shop created exactly one order.

    python docs/examples/payment_toolchain.py --url http://127.0.0.1:8080
"""

from __future__ import annotations

import argparse
import os
import uuid
from typing import Any

from mnemo.client import MnemoAPIError, MnemoClient, Toolchain

CUSTOMER = "user:C1042"
PLAN = ["create_order", "payment_link", "confirm_payment"]


class Shop:
    """Stand-ins for the shop's tools; each call has a side effect worth not repeating."""

    def __init__(self) -> None:
        self.orders: list[str] = []
        self.psp_up = False

    def create_order(self, chain: Toolchain) -> dict[str, Any]:
        self.orders.append(f"O-{1000 + len(self.orders)}")
        return {"order_id": self.orders[-1], "amount_eur": 42}

    def payment_link(self, chain: Toolchain) -> dict[str, Any]:
        if not self.psp_up:
            raise ConnectionError("the payment service did not answer")
        return {"url": f"https://pay.example/{chain.output('create_order')['order_id']}"}

    def confirm_payment(self, chain: Toolchain) -> dict[str, Any]:
        return {"paid": True, "order_id": chain.output("create_order")["order_id"]}


def run(device: str, mnemo: MnemoClient, shop: Shop, chain: Toolchain) -> Toolchain:
    """Run the toolchain from its next step until it is done or a step fails."""
    while chain.next_step is not None:
        step = chain.next_step
        try:
            output = getattr(shop, step)(chain)
        except ConnectionError as exc:
            chain = mnemo.fail_step(
                chain.toolchain_id, step, type="unavailable", reason=str(exc), retryable=True
            )
            print(f"{device}: {step} failed ({chain.failed.error.reason if chain.failed else ''})")
            return chain
        chain = mnemo.complete_step(chain.toolchain_id, step, output)
        print(f"{device}: {step} done -> {output}")
    return chain


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", default=os.environ.get("MNEMO_URL", "http://127.0.0.1:8080"))
    parser.add_argument(
        "--api-key",
        default=os.environ.get("MNEMO_API_KEY"),
        help="an API key with memory:read and memory:write (default: MNEMO_API_KEY)",
    )
    args = parser.parse_args(argv)
    shop = Shop()
    checkout = f"checkout-{uuid.uuid4().hex[:8]}"

    with MnemoClient(args.url, principal="laptop", api_key=args.api_key) as laptop:
        chain = laptop.start_toolchain(checkout, CUSTOMER, PLAN, ttl_seconds=3600)
        print(f"laptop: started {len(chain.steps)} steps, next {chain.next_step}")
        run("laptop", laptop, shop, chain)

    shop.psp_up = True  # later, on the phone
    with MnemoClient(args.url, principal="phone", api_key=args.api_key) as phone:
        chain = phone.toolchain(checkout)
        done = [d.step_id for d in chain.done]
        print(f"phone: status {chain.status}, done {done}, next {chain.next_step}")
        print(f"phone: order from before: {chain.output('create_order')['order_id']}")
        again = phone.complete_step(checkout, "create_order", chain.output("create_order"))
        print(f"phone: step one recorded again -> duplicate={again.duplicate}")
        try:
            phone.complete_step(checkout, "create_order", {"order_id": "O-9999"})
        except MnemoAPIError as exc:
            print(f"phone: another order for step one -> {exc.code}")
        chain = run("phone", phone, shop, chain)
        print(f"phone: status {chain.status}, expires {chain.expires_at.isoformat()}")
        expired = phone.toolchain(checkout, as_of=chain.expires_at)
        print(f"phone: read at its expiry it is still {expired.status} (it finished in time)")
    print(f"shop: {len(shop.orders)} order(s): {', '.join(shop.orders)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
