"""Token buckets per tenant and per API key, in this gateway process.

Each replica of the gateway keeps its own buckets: with N replicas behind a balancer, a
tenant may get up to N times the configured rate. A request takes one token from its
tenant's bucket and one from its key's; when either is empty the request is refused with
429 and Retry-After (whole seconds until a token is back)."""

from __future__ import annotations

import math
import threading
import time
from collections import OrderedDict
from collections.abc import Callable

from mnemo.domain.errors import MnemoError

__all__ = ["RateLimited", "RateLimiter", "TokenBucket"]

MAX_BUCKETS = 100_000  # per kind; the least recently used are dropped beyond it


class RateLimited(MnemoError):
    code = "RATE_LIMITED"

    def __init__(self, message: str, retry_after: float, field: str) -> None:
        seconds = max(1, math.ceil(retry_after))
        super().__init__(message, code="RATE_LIMITED", extra={"retry_after": seconds})
        self.retry_after = seconds
        self.limited = field


class TokenBucket:
    """`rate` tokens a second, up to `burst` held. Not thread-safe on its own."""

    __slots__ = ("burst", "rate", "stamp", "tokens")

    def __init__(self, rate: float, burst: int, now: float) -> None:
        self.rate = rate
        self.burst = float(burst)
        self.tokens = float(burst)
        self.stamp = now

    def refill(self, now: float) -> None:
        if now > self.stamp:
            self.tokens = min(self.burst, self.tokens + (now - self.stamp) * self.rate)
            self.stamp = now

    def wait_for_one(self) -> float:
        """Seconds until one token is there (0 when there is one now)."""
        if self.tokens >= 1.0:
            return 0.0
        return (1.0 - self.tokens) / self.rate if self.rate > 0 else math.inf


class RateLimiter:
    """Buckets per tenant and per key. A rate of 0 turns that limit off."""

    def __init__(
        self,
        tenant_rate: float,
        tenant_burst: int,
        key_rate: float,
        key_burst: int,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._limits = {"tenant": (tenant_rate, tenant_burst), "key": (key_rate, key_burst)}
        self._buckets: dict[str, OrderedDict[str, TokenBucket]] = {
            "tenant": OrderedDict(),
            "key": OrderedDict(),
        }
        self._clock = clock
        self._lock = threading.Lock()

    def _bucket(self, kind: str, name: str, now: float) -> TokenBucket | None:
        rate, burst = self._limits[kind]
        if rate <= 0:
            return None
        buckets = self._buckets[kind]
        bucket = buckets.get(name)
        if bucket is None:
            bucket = buckets[name] = TokenBucket(rate, burst, now)
            if len(buckets) > MAX_BUCKETS:
                buckets.popitem(last=False)
        else:
            buckets.move_to_end(name)
            bucket.refill(now)
        return bucket

    def check(self, tenant: str, key_id: str) -> None:
        """Take one token from the tenant's bucket and one from the key's, or none and
        raise RateLimited."""
        with self._lock:
            now = self._clock()
            pairs = [
                (kind, bucket)
                for kind, name in (("tenant", tenant), ("key", key_id))
                if (bucket := self._bucket(kind, name, now)) is not None
            ]
            for kind, bucket in pairs:
                wait = bucket.wait_for_one()
                if wait > 0:
                    raise RateLimited(
                        f"too many requests for this {kind}; retry in {math.ceil(wait)} s",
                        wait,
                        kind,
                    )
            for _, bucket in pairs:
                bucket.tokens -= 1.0
