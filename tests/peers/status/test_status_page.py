"""The status page (GET /) in a real browser: Debian's headless Chromium driven over WebDriver
(chromium-driver), with JavaScript on and off, against the real `snowflake serve`: the identity
shown, the decode box's result for the SPEC's worked example, the live refresh, and the
not-ready reason while the node is fenced (its etcd frozen with SIGSTOP).

Set SNOWFLAKE_STATUS_SCREENSHOT=PATH to keep a screenshot of the page of a fleet node (the one
in docs/ was made that way)."""

import json
import os
import shutil
import signal
import socket
import subprocess
import tempfile
import threading
import time
import urllib.parse
import urllib.request

import pytest
from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.common.exceptions import WebDriverException
from selenium.webdriver.support.ui import WebDriverWait

from conftest import Serve, wait_until

# SPEC §2's worked example: 1700000000000 ms, datacenter 7, worker 13, sequence 4095.
WORKED_ID = "1724551110457221119"
WORKED_FIELDS = {
    "id": WORKED_ID,
    "time": "2023-11-14T22:13:20.000Z",
    "timestamp_ms": "1700000000000",
    "datacenter_id": "7",
    "worker_id": "13",
    "sequence": "4095",
}
FENCED = "cannot prove it still holds its worker id"


def browser(javascript: bool):
    options = Options()
    options.binary_location = os.environ.get("SNOWFLAKE_TEST_CHROMIUM", "/usr/bin/chromium")
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                "--window-size=1000,1200", "--no-first-run", "--disable-extensions"):
        options.add_argument(arg)
    if not javascript:
        options.add_experimental_option(
            "prefs", {"profile.managed_default_content_settings.javascript": 2}
        )
    service = Service(
        executable_path=os.environ.get("SNOWFLAKE_TEST_CHROMEDRIVER", "/usr/bin/chromedriver")
    )
    driver = webdriver.Chrome(options=options, service=service)
    driver.set_page_load_timeout(20)
    return driver


@pytest.fixture(params=[True, False], ids=["javascript", "no-javascript"])
def page(request):
    driver = browser(request.param)
    driver.javascript = request.param
    yield driver
    driver.quit()


def url(node, path="/"):
    host, port = node.addrs["http"]
    return f"http://{host}:{port}{path}"


def text(driver, element_id):
    """The element's text; empty while the page is being replaced (a form's navigation, or the
    script swapping the element), when references to the old one go stale."""
    try:
        return driver.find_element(By.ID, element_id).text
    except WebDriverException:
        return ""


def decoded(driver):
    try:
        result = driver.find_element(By.ID, "decode-result")
        return {
            dd.get_attribute("data-field"): dd.text
            for dd in result.find_elements(By.TAG_NAME, "dd")
        }
    except WebDriverException:
        return {}


def live(driver):
    """Whether the page's script has refreshed it (the IDs/s field holds a number)."""
    return text(driver, "rate").replace(",", "").isdigit()


def test_identity_readiness_and_decoding(page):
    node = Serve("--datacenter-id", "3", "--worker-id", "9", protocols=("http",))
    try:
        for _ in range(5):
            urllib.request.urlopen(url(node, "/v1/ids?count=100")).read()
        page.get(url(node))
        assert text(page, "identity") == "datacenter 3 · worker 9"
        assert text(page, "identity-source") == "static"
        assert text(page, "ready") == "Ready: issuing IDs."
        assert "snowflake 3/9: ready" == page.title
        if page.javascript:
            # Refreshed from /v1/status every second: the rate appears after two answers.
            WebDriverWait(page, 10).until(live)
        else:
            time.sleep(2.5)
            assert text(page, "rate") == "…", "the page's script ran with JavaScript off"
        box = page.find_element(By.ID, "decode-input")
        box.send_keys(WORKED_ID)
        if not page.javascript:
            # Submitted: the server renders the page again with the result.
            page.find_element(By.CSS_SELECTOR, "#decode-form button").click()
        # With JavaScript, decoded in the browser as it is typed (no request).
        WebDriverWait(page, 10).until(lambda d: decoded(d) == WORKED_FIELDS)
        if not page.javascript:
            assert f"decode={WORKED_ID}" in page.current_url
        # The same fields as the service's own decoder.
        served = json.load(urllib.request.urlopen(url(node, f"/v1/decode/{WORKED_ID}")))
        assert {k: str(served[k]) for k in WORKED_FIELDS} == WORKED_FIELDS
        # Bad IDs: the service's own message, either way (the script leaves anything it cannot
        # decode to the server's form).
        for bad, message in [
            ("12x", 'expected a decimal integer in 0..=9223372036854775807, found "12x"'),
            ("-5", "expected 0..=9223372036854775807, found -5"),
            ("9223372036854775808", "expected 0..=9223372036854775807, found 9223372036854775808"),
        ]:
            box = page.find_element(By.ID, "decode-input")
            box.clear()
            box.send_keys(bad)
            page.find_element(By.CSS_SELECTOR, "#decode-form button").click()
            WebDriverWait(page, 10).until(lambda d: message in text(d, "decode-result"))
            served = urllib.request.urlopen(url(node, f"/?decode={urllib.parse.quote(bad)}")).read().decode()
            assert message.replace('"', "&quot;") in served
    finally:
        node.stop()


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd():
    data = tempfile.mkdtemp(prefix="snowflake-status-etcd-")
    client, peer = free_port(), free_port()
    proc = subprocess.Popen(
        [shutil.which("etcd") or "etcd", "--name", "s1", "--data-dir", data,
         "--listen-client-urls", f"http://127.0.0.1:{client}",
         "--advertise-client-urls", f"http://127.0.0.1:{client}",
         "--listen-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-advertise-peer-urls", f"http://127.0.0.1:{peer}",
         "--initial-cluster", f"s1=http://127.0.0.1:{peer}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    endpoint = f"http://127.0.0.1:{client}"

    def healthy():
        try:
            return b"true" in urllib.request.urlopen(endpoint + "/health", timeout=1).read()
        except OSError:
            return False

    assert wait_until(healthy, timeout=20), "etcd did not start"
    proc.endpoint = endpoint
    yield proc
    proc.send_signal(signal.SIGCONT)
    proc.kill()
    proc.wait()
    shutil.rmtree(data, ignore_errors=True)


def test_a_fenced_node_says_why_and_the_fleet_table_shows_the_held_pairs(page, etcd):
    nodes = [
        Serve("--etcd-endpoints", etcd.endpoint, "--lease-ttl-secs", "3",
              "--datacenter-id", "2", protocols=("http",))
        for _ in range(2)
    ]
    try:
        node = nodes[0]
        info = json.load(urllib.request.urlopen(url(node, "/v1/info")))
        # The fleet table is read every 10 s: wait until it shows both nodes.
        def both_held():
            status = json.load(urllib.request.urlopen(url(node, "/v1/status")))
            return len(status.get("fleet", {}).get("held", [])) == 2

        assert wait_until(both_held, timeout=20)
        page.get(url(node))
        assert text(page, "identity") == f"datacenter 2 · worker {info['worker_id']}"
        assert text(page, "identity-source") == "etcd"
        assert text(page, "lease-state") == "held"
        rows = page.find_elements(By.CSS_SELECTOR, "#fleet tbody tr")
        assert [r.find_elements(By.TAG_NAME, "td")[0].text for r in rows] == ["0", "1"]
        assert "(pid " in rows[0].text and "http=" in rows[0].text
        assert text(page, "fleet-summary").startswith("2 of 32 worker ids held, 30 free")
        shot = os.environ.get("SNOWFLAKE_STATUS_SCREENSHOT")
        if shot and page.javascript:
            # Some traffic for the IDs/s, and the worked example in the decode box.
            stop = threading.Event()

            def load():
                while not stop.is_set():
                    urllib.request.urlopen(url(node, "/v1/ids?count=1000")).read()

            worker = threading.Thread(target=load, daemon=True)
            worker.start()
            page.find_element(By.ID, "decode-input").send_keys(WORKED_ID)
            time.sleep(3)
            WebDriverWait(page, 10).until(lambda d: live(d) and text(d, "rate") != "0")
            page.save_screenshot(shot)
            stop.set()
            worker.join()

        etcd.send_signal(signal.SIGSTOP)
        if page.javascript:
            # The open page follows the node by itself.
            WebDriverWait(page, 20).until(lambda d: FENCED in text(d, "reason"))
            assert text(page, "ready") == "Not ready: not issuing IDs."
        else:
            def fenced():
                page.refresh()
                return FENCED in text(page, "reason")

            assert wait_until(fenced, timeout=20, interval=0.5)
            assert text(page, "ready") == "Not ready: not issuing IDs."
        assert page.title.endswith("NOT READY")
    finally:
        etcd.send_signal(signal.SIGCONT)
        for n in nodes:
            n.stop()
