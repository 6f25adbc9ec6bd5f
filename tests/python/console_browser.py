"""The web console in a real browser (driven by tests/console.rs).

Usage: console_browser.py ACTIVE_URL STANDBY_URL BROKER TOPIC

Opens the active controller's console in headless Chromium, waits until
it shows every broker active and TOPIC's partitions led, prints READY and
waits for a line on stdin (the test kills BROKER meanwhile). Then waits
until the page shows BROKER fenced, no partition of TOPIC led by it or
with it in the ISR, the partitions flagged under-replicated and the fence
among the events; then checks the standby's page says it is a standby and
links to the active console. With KEEL_CONSOLE_SCREENSHOT=FILE.png it
saves the active console, broker fenced, there. Prints PASS (exit 0) or FAIL: why (exit 1).
Every wait is bounded.
"""

import os
import sys
import tempfile
import time

from selenium import webdriver
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By
from selenium.webdriver.support.ui import Select

WAIT_S = 60


def browser(profile):
    opts = webdriver.ChromeOptions()
    opts.binary_location = os.environ.get("KEEL_TEST_CHROMIUM", "/usr/bin/chromium")
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage",
              "--disable-gpu", "--window-size=1400,1800", f"--user-data-dir={profile}"):
        opts.add_argument(a)
    service = Service(executable_path=os.environ.get("KEEL_TEST_CHROMEDRIVER", "/usr/bin/chromedriver"))
    return webdriver.Chrome(options=opts, service=service)


def rows(d, table):
    """The text of each cell of each body row of a table, read in one go
    in the page (it re-renders every 2 s: elements found one by one may
    be replaced in between)."""
    return d.execute_script(
        "return Array.from(document.querySelectorAll('#' + arguments[0] + ' tbody tr'))"
        ".map(tr => Array.from(tr.querySelectorAll('td')).map(td => td.innerText.trim()));",
        table)


def wait_for(d, what, check):
    """Polls check(d) until it returns a true value (bounded)."""
    deadline = time.time() + WAIT_S
    last = None
    while time.time() < deadline:
        try:
            last = check(d)
            if last:
                return last
        except Exception as e:  # a row replaced under us: look again
            last = e
        time.sleep(0.25)
    shot = os.path.join(tempfile.gettempdir(), "keel-console-failure.png")
    d.save_screenshot(shot)
    raise AssertionError(f"{what} (last: {last!r}; screenshot {shot})")


def brokers(d):
    # id, state, epoch, address, rack, last heartbeat, offline dirs
    return {r[0]: r[1] for r in rows(d, "brokers") if len(r) == 7}


def topic_partitions(d, topic):
    # topic, partition, leader, leader epoch, replicas, ISR, health
    return [r for r in rows(d, "partitions") if len(r) == 7 and r[0] == topic]


def members(cell):
    return [x.strip() for x in cell.strip("[]").split(",") if x.strip()]


def main():
    active_url, standby_url, broker, topic = sys.argv[1:5]
    with tempfile.TemporaryDirectory() as profile:
        d = browser(profile)
        try:
            d.get(active_url)
            wait_for(d, "the page names its node the active controller",
                     lambda d: "the active controller" in d.find_element(By.ID, "role").text)
            wait_for(d, "every broker active",
                     lambda d: len(brokers(d)) >= 3 and all(s == "active" for s in brokers(d).values()))
            wait_for(d, f"{topic}'s partitions led",
                     lambda d: len(topic_partitions(d, topic)) == 3
                     and all(r[2] != "none" for r in topic_partitions(d, topic)))
            print("READY", flush=True)
            if sys.stdin.readline().strip() != "KILLED":
                raise AssertionError("the test did not kill the broker")

            wait_for(d, f"broker {broker} shown fenced",
                     lambda d: brokers(d).get(broker) == "fenced")
            wait_for(d, f"no partition of {topic} led by or in sync on broker {broker}",
                     lambda d: len(topic_partitions(d, topic)) == 3 and all(
                         r[2] != broker and broker not in members(r[5])
                         for r in topic_partitions(d, topic)))
            wait_for(d, f"{topic}'s partitions flagged under-replicated",
                     lambda d: len(topic_partitions(d, topic)) == 3 and all(
                         "under-replicated" in r[6] for r in topic_partitions(d, topic)))
            wait_for(d, "the health line counts one fenced broker",
                     lambda d: "fenced brokers: 1" in d.find_element(By.ID, "health").text)
            # The health filter keeps the topic under "under-replicated"
            # and drops it under "offline".
            Select(d.find_element(By.ID, "filter")).select_by_value("under-replicated")
            wait_for(d, "the under-replicated filter lists the topic",
                     lambda d: any(r and r[0] == topic for r in rows(d, "topics")))
            Select(d.find_element(By.ID, "filter")).select_by_value("offline")
            wait_for(d, "the offline filter hides the topic",
                     lambda d: not any(r and r[0] == topic for r in rows(d, "topics")))
            wait_for(d, "the fence among the recent events",
                     lambda d: any(f"broker fenced: broker {broker}" in " ".join(r)
                                   for r in rows(d, "events")))

            if os.environ.get("KEEL_CONSOLE_SCREENSHOT"):
                d.save_screenshot(os.environ["KEEL_CONSOLE_SCREENSHOT"])
            d.get(standby_url)
            role = wait_for(d, "the standby's page says it is not the active controller",
                            lambda d: (lambda t: t if "not the active controller" in t else None)(
                                d.find_element(By.ID, "role").text))
            link = wait_for(d, "a link to the active console",
                            lambda d: d.find_element(By.ID, "active-link").get_attribute("href"))
            if link != active_url:
                raise AssertionError(f"standby links to {link}, not {active_url} ({role!r})")
            wait_for(d, f"the standby shows broker {broker} fenced too",
                     lambda d: brokers(d).get(broker) == "fenced")
            wait_for(d, "the fence among the standby's events too",
                     lambda d: any(f"broker fenced: broker {broker}" in " ".join(r)
                                   for r in rows(d, "events")))
            print("PASS", flush=True)
            return 0
        except Exception as e:  # any failure is reported on the protocol line
            print(f"FAIL: {type(e).__name__}: {e}", flush=True)
            return 1
        finally:
            d.quit()


if __name__ == "__main__":
    sys.exit(main())
