"""The console in a real headless Chromium, driven over the Chrome DevTools Protocol, against
a real uvicorn server on seeded data: heat-map cells and their colours, a memory's life,
the context inspector, the live tail, audit and rejections, and the phone layout.

Screenshots land in tests/artifacts/console/. Without Chromium the tests are skipped,
except under CI (CI=true), where a missing browser fails them.
"""

from __future__ import annotations

import base64
import importlib.util
import itertools
import json
import os
import shutil
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
import uvicorn
from mnemo_gateway.app import create_app
from tests.support import fixed_key, missing

from mnemo.adapters.clocks import FixedClock
from mnemo.bootstrap import Platform

ARTIFACTS = Path(__file__).parents[1] / "artifacts" / "console"
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-quic",
)
PHONE = {"width": 390, "height": 844, "deviceScaleFactor": 2, "mobile": True}
LAPTOP = {"width": 1366, "height": 900, "deviceScaleFactor": 1, "mobile": False}


def _chromium() -> str:
    for name in (os.environ.get("MNEMO_CHROMIUM"), "chromium", "chromium-browser"):
        found = shutil.which(name) if name else None
        if found:
            return found
    missing("chromium", "apt-get install chromium; make test installs it")
    raise AssertionError("unreachable")


def _api_tests() -> ModuleType:
    """The seeding shared with test_console_api.py, loaded from beside this file."""
    name = "mnemo_console_api_tests"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(
        name, Path(__file__).with_name("test_console_api.py")
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _rgb(hex_colour: str) -> str:
    h = hex_colour.lstrip("#")
    r, g, b = (int(h[i : i + 2], 16) for i in (0, 2, 4))
    return f"rgb({r}, {g}, {b})"


def _until(check: Any, timeout: float, what: str, step: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(step)


# ---- the server ----------------------------------------------------------------------------


@dataclass
class Served:
    base: str
    platform: Platform
    seeded: Any

    def api(self, path: str, tenant: str = "acme") -> Any:
        request = urllib.request.Request(
            self.base + path, headers={"Authorization": f"Bearer {fixed_key(tenant)}"}
        )
        with urllib.request.urlopen(request, timeout=10) as response:
            return json.loads(response.read())


@pytest.fixture(scope="module")
def served(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """Mnemo seeded through its use cases, served by uvicorn on a free loopback port."""
    api_tests = _api_tests()
    clock = FixedClock(api_tests.T0)
    platform = api_tests.open_platform(tmp_path_factory.mktemp("browser") / "data", clock)
    seeded = api_tests.seed(platform, clock)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    port = sock.getsockname()[1]
    server = uvicorn.Server(uvicorn.Config(create_app(platform), log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"

    def healthy() -> bool:
        try:
            with urllib.request.urlopen(base + "/healthz", timeout=1) as r:
                return bool(r.status == 200)
        except OSError:
            return False

    try:
        _until(healthy, 30, "the server to answer /healthz")
        yield Served(base, platform, seeded)
    finally:
        server.should_exit = True
        thread.join(30)
        sock.close()
        platform.close()


# ---- the browser -------------------------------------------------------------------------------


class Page:
    """One page target, spoken to over the DevTools Protocol."""

    def __init__(self, ws_url: str) -> None:
        try:
            import websocket
        except ImportError:  # pragma: no cover - the dev extra installs it
            missing("websocket-client", "pip install -e '.[dev]'")
        self.ws = websocket.create_connection(ws_url, timeout=30, suppress_origin=True)
        self.next_id = 0
        self.errors: list[str] = []

    def _note(self, message: dict[str, Any]) -> None:
        method = message.get("method")
        params = message.get("params", {})
        if method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            self.errors.append(str(details.get("exception", {}).get("description") or details))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a)) for a in params.get("args", [])))
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            self.errors.append(f"{entry.get('source')}: {entry.get('text')} {entry.get('url', '')}")

    def send(self, method: str, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        mid = self.next_id
        self.ws.send(json.dumps({"id": mid, "method": method, "params": params}))
        while True:
            message = json.loads(self.ws.recv())
            if message.get("id") == mid:
                if "error" in message:
                    raise AssertionError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._note(message)

    def eval(self, expression: str) -> Any:
        result = self.send(
            "Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True
        )
        if "exceptionDetails" in result:
            raise AssertionError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 15.0) -> Any:
        return _until(lambda: self.eval(expression), timeout, expression)

    def open(self, url: str) -> None:
        self.send("Page.navigate", url=url)
        self.wait("document.readyState === 'complete' && document.body.dataset.ready === 'true'")

    def viewport(self, metrics: dict[str, Any]) -> None:
        self.send("Emulation.setDeviceMetricsOverride", **metrics)

    def click(self, selector: str) -> None:
        """A real mouse click in the middle of the element."""
        box = self.eval(
            f"""(() => {{
              const el = document.querySelector({json.dumps(selector)});
              if (!el) return null;
              el.scrollIntoView({{block: "center", inline: "center"}});
              const r = el.getBoundingClientRect();
              return {{x: r.left + r.width / 2, y: r.top + r.height / 2}};
            }})()"""
        )
        assert box is not None, f"no element {selector}"
        for kind in ("mouseMoved", "mousePressed", "mouseReleased"):
            self.send(
                "Input.dispatchMouseEvent",
                type=kind,
                x=box["x"],
                y=box["y"],
                button="left",
                clickCount=1,
            )

    def screenshot(self, name: str) -> Path:
        """The whole page, not just the viewport."""
        size = self.send("Page.getLayoutMetrics")["cssContentSize"]
        shot = self.send(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1},
        )
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        path = ARTIFACTS / f"{name}.png"
        path.write_bytes(base64.b64decode(shot["data"]))
        return path

    def no_horizontal_scroll(self) -> bool:
        return bool(
            self.eval(
                "document.documentElement.scrollWidth <= document.documentElement.clientWidth"
            )
        )


@pytest.fixture(scope="module")
def browser(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Page]:
    binary = _chromium()
    profile = tmp_path_factory.mktemp("chromium-profile")
    log = (profile.parent / "chromium.log").open("wb")
    proc = subprocess.Popen(
        [
            binary,
            *FLAGS,
            f"--user-data-dir={profile}",
            "--remote-debugging-address=127.0.0.1",
            "--remote-debugging-port=0",
            "--window-size=1366,900",
            "about:blank",
        ],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    page: Page | None = None
    try:
        active = profile / "DevToolsActivePort"
        _until(
            lambda: proc.poll() is not None or (active.exists() and active.read_text().strip()),
            30,
            "Chromium's DevTools port",
        )
        assert proc.poll() is None, f"chromium exited with {proc.returncode}"
        port = int(active.read_text().split()[0])
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as r:
            targets = json.loads(r.read())
        target = next(t for t in targets if t["type"] == "page")
        page = Page(target["webSocketDebuggerUrl"])
        for domain in ("Page", "Runtime", "Log"):
            page.send(f"{domain}.enable")
        yield page
    finally:
        if page is not None:
            page.ws.close()
        proc.terminate()
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
        log.close()


_opened = itertools.count()


def console_url(served: Served) -> str:
    """The console for tenant acme: its key in the fragment (which the page drops from the
    address bar); a fresh query each time, so every open is a full load."""
    return f"{served.base}/console?principal=browser-test&n={next(_opened)}#key={fixed_key('acme')}"


@pytest.fixture
def page(browser: Page, served: Served) -> Iterator[Page]:
    """The console on a laptop screen, loaded for tenant acme; no script error allowed."""
    browser.errors.clear()
    browser.viewport(LAPTOP)
    browser.open(console_url(served))
    yield browser
    assert browser.errors == [], browser.errors


# ---- the tests ---------------------------------------------------------------------------------


def test_heat_map_cells_and_colours(page: Page, served: Served) -> None:
    api = served.api("/v1/insights/heatmap")
    colour = {x["heat"]: _rgb(x["colour"]) for x in api["legend"]}
    cells = page.eval(
        """[...document.querySelectorAll('#heatmap .cell')].map(c => ({
             id: c.dataset.memoryId,
             heat: c.dataset.heat,
             bg: getComputedStyle(c).backgroundColor,
             width: c.getBoundingClientRect().width,
           }))"""
    )
    expected = {c["memory_id"]: c["heat"] for c in api["cells"]}
    assert len(cells) == len(api["cells"]) == 6
    assert {c["id"] for c in cells} == set(expected)
    for c in cells:
        assert c["heat"] == expected[c["id"]]
        assert c["bg"] == colour[expected[c["id"]]], c
    ids = served.seeded.ids
    got = {c["id"]: c for c in cells}
    assert got[ids["hot"]]["bg"] == "rgb(220, 38, 38)", "the hot spot is red"
    assert got[ids["rule"]]["width"] > got[ids["tea"]]["width"], "a heavier memory is bigger"
    legend = page.eval("document.querySelector('#legend').textContent")
    assert "hot (1)" in legend
    assert "cool (2)" in legend
    page.screenshot("laptop-heatmap")


def test_a_cell_opens_the_memorys_life(page: Page, served: Served) -> None:
    hot = served.seeded.ids["hot"]
    life = served.api(f"/v1/insights/memories/{hot}/life")
    page.click(f'#heatmap .cell[data-memory-id="{hot}"]')
    page.wait("!document.querySelector('#life').hidden")
    rows = page.wait(
        f"""(() => {{
          const rows = [...document.querySelectorAll('#life-timeline tbody tr')];
          return rows.length === {len(life["timeline"])} && rows.map(r => r.textContent);
        }})()"""
    )
    text = "\n".join(rows)
    for what in ("registered", "in_context", "truncated", "cited", "decayed"):
        assert what in text
    contexts = page.eval("document.querySelectorAll('#life-contexts button').length")
    assert contexts == len(life["contexts"]) == 4
    assert "travel diary" in page.eval("document.querySelector('#life-memory').textContent")
    page.screenshot("laptop-life")


def test_a_context_shows_its_text_and_what_was_left_out(page: Page, served: Served) -> None:
    hot = served.seeded.ids["hot"]
    tight = served.seeded.contexts["t1"]
    view = served.api(f"/v1/insights/contexts/{tight}")
    page.click(f'#heatmap .cell[data-memory-id="{hot}"]')
    page.wait(
        f"document.querySelector('#life-contexts button[data-request-id=\"{tight}\"]') !== null"
    )
    page.click(f'#life-contexts button[data-request-id="{tight}"]')
    page.wait("!document.querySelector('#inspector').hidden")
    rendered = page.wait("document.querySelector('#inspector-rendered').textContent")
    assert rendered == view["rendered"]
    left = page.eval(
        """[...document.querySelectorAll('#inspector-leftout li')].map(li => ({
             id: li.dataset.memoryId, reason: li.querySelector('.reason').textContent }))"""
    )
    assert {(x["id"], x["reason"]) for x in left} == {
        (p["memory_id"], p["reason"]) for p in view["left_out"]
    }
    assert sorted(x["reason"] for x in left) == ["budget", "budget", "budget", "superseded"]
    included = page.eval("document.querySelectorAll('#inspector-included li').length")
    assert included == len(view["included"]) == 2
    assert page.eval("document.querySelector('#tabbtn-contexts').ariaSelected") == "true"
    page.screenshot("laptop-context")


def test_the_event_tail_is_live_and_filters(page: Page, served: Served) -> None:
    page.click("#tabbtn-events")
    page.wait("document.querySelectorAll('#events tbody tr').length > 0")
    top = page.eval("Number(document.querySelector('#events tbody tr').dataset.offset)")
    assert top == served.platform.log.head()
    acme = _api_tests().ACME
    published = served.platform.app.publish(
        acme,
        [
            {
                "type": "ObservationRecorded",
                "schema_version": 2,
                "stream": "user:U3",
                "payload": {"text": "hello, how are you?"},
            }
        ],
    )
    offset = published.accepted[0].offset
    page.wait(
        f"document.querySelector('#events tbody tr[data-offset=\"{offset}\"]') !== null",
        timeout=20,
    )
    page.screenshot("laptop-events")
    page.eval("document.querySelector('#f-type').value = 'ContextAssembled'")
    page.click("#event-filters button[type=submit]")
    types = page.wait(
        """(() => {
          const rows = [...document.querySelectorAll('#events tbody tr')];
          const types = rows.map(r => r.children[2].textContent);
          return types.length === 4 && types.every(t => t === 'ContextAssembled') && types;
        })()"""
    )
    assert len(types) == 4


def test_audit_rejections_and_dead_letters(page: Page) -> None:
    page.click("#tabbtn-health")
    assert page.wait("document.querySelector('#audit-state')?.dataset.status") == "intact"
    reasons = page.wait(
        """(() => {
          const rows = [...document.querySelectorAll('#rejections tbody tr')];
          return rows.length === 2 && rows.map(r => r.querySelector('.reason').textContent);
        })()"""
    )
    assert reasons == ["VERSION_CONFLICT", "ALREADY_EXPIRED"]
    assert page.eval("document.querySelectorAll('#dead-letters li').length") == 0
    assert page.eval("!document.querySelector('#dead-empty').hidden")
    assert "no dead-letter topic" in page.eval("document.querySelector('#tab-health').textContent")
    page.screenshot("laptop-health")


def test_the_phone_layout_has_no_horizontal_scroll(page: Page, served: Served) -> None:
    page.viewport(PHONE)
    page.open(console_url(served))
    assert page.eval("window.innerWidth") == 390
    hot = served.seeded.ids["hot"]
    assert page.eval("document.querySelectorAll('#heatmap .cell').length") == 6
    page.click(f'#heatmap .cell[data-memory-id="{hot}"]')
    page.wait("document.querySelectorAll('#life-timeline tbody tr').length > 0")
    assert page.no_horizontal_scroll()
    page.screenshot("phone-heatmap-life")

    tight = served.seeded.contexts["t1"]
    page.click(f'#life-contexts button[data-request-id="{tight}"]')
    page.wait("document.querySelector('#inspector-rendered').textContent.length > 0")
    assert page.no_horizontal_scroll()
    page.screenshot("phone-context")

    page.click("#tabbtn-events")
    page.wait("document.querySelectorAll('#events tbody tr').length > 0")
    assert page.no_horizontal_scroll()
    page.screenshot("phone-events")

    page.click("#tabbtn-health")
    page.wait("document.querySelector('#audit-state') !== null")
    assert page.no_horizontal_scroll()
    page.screenshot("phone-health")
