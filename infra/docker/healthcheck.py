"""Container health check for the Mnemo image: exit 0 when the component answers /healthz.

Consumers serve it on MNEMO_HEALTH_PORT (8081), or on their own MNEMO_<CONSUMER>_HEALTH_PORT
when it is set (MNEMO_AUDIT_HEALTH_PORT), the gateway on MNEMO_GATEWAY_PORT (8080); any of
them answering 200 counts. Standard library only. Kubernetes uses the chart's probes
instead; this is for plain container runtimes.
"""

from __future__ import annotations

import os
import re
import sys
import urllib.request


def healthy(port: str, timeout: float = 3.0) -> bool:
    url = f"http://127.0.0.1:{port}/healthz"
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except OSError:
        return False


_OWN_HEALTH_PORT = re.compile(r"^MNEMO_[A-Z]+_HEALTH_PORT$")


def main() -> int:
    own = [value for name, value in os.environ.items() if _OWN_HEALTH_PORT.match(name)]
    ports = (
        *own,
        os.environ.get("MNEMO_HEALTH_PORT", "8081"),
        os.environ.get("MNEMO_GATEWAY_PORT", "8080"),
    )
    return 0 if any(healthy(port) for port in ports) else 1


if __name__ == "__main__":
    sys.exit(main())
