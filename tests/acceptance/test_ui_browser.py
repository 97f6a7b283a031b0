"""Issue 31: the operator web UI in a real browser (Debian's chromium through chromedriver).

A real `burrow server` process serves the UI, a real `burrow worker` process runs the workflows,
and the browser logs in, filters, opens runs, signals, terminates, and is refused what its role
does not allow. Screenshots of each page are saved as test artifacts; axe-core checks each page.
"""

from __future__ import annotations

import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from selenium.common.exceptions import StaleElementReferenceException, TimeoutException
from selenium.webdriver.common.by import By
from selenium.webdriver.support import expected_conditions as ready
from selenium.webdriver.support.ui import Select, WebDriverWait

from burrow import Client
from burrow.protocol.schedules import ScheduleSpec
from tests.acceptance.conftest import WorkerFactory
from tests.apps import flows
from tests.support import browser

MISSING = browser.browser_missing()
pytestmark = [
    pytest.mark.slow,
    pytest.mark.sticky_cache_set_by_test,
    pytest.mark.skipif(MISSING is not None, reason=str(MISSING)),
]

OPERATOR = "ui-operator-token"
VIEWER = "ui-viewer-token"
WORKER = "ui-worker-token"


@pytest.fixture
def server(database_url: str, tmp_path: Path) -> Iterator[str]:
    """A `burrow server` process with split tokens; its base URL."""
    proc, base = browser.start_server(
        database_url,
        tmp_path / "server.log",
        BURROW_OPERATOR_TOKEN=OPERATOR,
        BURROW_VIEWER_TOKEN=VIEWER,
        BURROW_WORKER_TOKEN=WORKER,
    )
    yield base
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout=15)
    finally:
        if proc.poll() is None:
            proc.kill()


@pytest.fixture
def driver() -> Iterator[Any]:
    with browser.chromium() as session:
        yield session


def wait(driver: Any, seconds: float = 20) -> WebDriverWait:  # type: ignore[type-arg]
    # Live refresh swaps parts of the page: an element read while it is replaced is read again.
    return WebDriverWait(
        driver, seconds, poll_frequency=0.1, ignored_exceptions=[StaleElementReferenceException]
    )


def arrive(driver: Any, part: str, seconds: float = 30) -> None:
    """Wait for the browser to be at a URL containing `part`; say where it is instead."""
    try:
        wait(driver, seconds).until(ready.url_contains(part))
    except TimeoutException:
        body = driver.find_element(By.TAG_NAME, "body").text[:1500]
        raise AssertionError(f"not at {part!r} but {driver.current_url}:\n{body}") from None


def log_in(driver: Any, base: str, token: str, then: str = "/ui/workflows") -> None:
    driver.get(f"{base}{then}")
    arrive(driver, "/ui/login")
    driver.find_element(By.ID, "token").send_keys(token)
    driver.find_element(By.CSS_SELECTOR, ".login button[type=submit]").click()
    wait(driver).until(lambda d: "/ui/login" not in d.current_url)


def assert_accessible(driver: Any, page: str) -> None:
    violations = browser.axe_violations(driver)
    assert not violations, f"{page}: " + "; ".join(violations)


async def test_log_in_filter_the_list_and_see_a_hostile_id_as_text(
    server: str, driver: Any, client: Client
) -> None:
    """Issue 31: token login, the list filtered by a query, and a `<script>` id shown as text."""
    hostile = "<script>window.pwned = true</script><b>bold</b>"
    await client.start_workflow(flows.CountdownFlow, 0, id=hostile, task_queue="ui-nobody")
    await client.start_workflow(flows.ClockFlow, id="ui-clock-1", task_queue="ui-nobody")

    log_in(driver, server, OPERATOR)
    assert "burrow_ui" in {c["name"] for c in driver.get_cookies()}
    assert all(c.get("httpOnly") for c in driver.get_cookies() if c["name"] == "burrow_ui")
    table = driver.find_element(By.CSS_SELECTOR, "table.runs")
    assert hostile in table.text  # the markup is text on the page
    assert driver.execute_script("return window.pwned === undefined")
    assert not driver.find_elements(By.CSS_SELECTOR, "table.runs td b")
    browser.screenshot(driver, "workflows-list")
    assert_accessible(driver, "workflows")

    query = driver.find_element(By.ID, "query")
    query.send_keys("WorkflowType = 'ClockFlow'")
    driver.find_element(By.CSS_SELECTOR, ".filters button[type=submit]").click()
    arrive(driver, "query=")
    rows = driver.find_elements(By.CSS_SELECTOR, "table.runs tbody tr")
    assert [r.find_element(By.CSS_SELECTOR, "td.id").text for r in rows] == ["ui-clock-1"]
    assert "All 1" in driver.find_element(By.CSS_SELECTOR, ".counts").text

    Select(driver.find_element(By.ID, "status")).select_by_value("Completed")
    driver.find_element(By.CSS_SELECTOR, ".filters button[type=submit]").click()
    arrive(driver, "status=Completed")
    assert "No runs match." in driver.find_element(By.ID, "results").text


def test_a_worker_token_does_not_log_in(server: str, driver: Any) -> None:
    """Issue 31: a worker's token opens no UI session, and the page says why."""
    driver.get(f"{server}/ui/login")
    driver.find_element(By.ID, "token").send_keys(WORKER)
    driver.find_element(By.CSS_SELECTOR, ".login button[type=submit]").click()
    assert "for workers" in driver.find_element(By.CSS_SELECTOR, "[role=alert]").text
    assert "burrow_ui" not in {c["name"] for c in driver.get_cookies()}
    browser.screenshot(driver, "login")
    assert_accessible(driver, "login")


def submit_confirmed(driver: Any, form: Any) -> None:
    """Submit an action form and accept its confirmation dialog."""
    form.find_element(By.CSS_SELECTOR, "button[type=submit]").click()
    wait(driver, 5).until(ready.alert_is_present())
    driver.switch_to.alert.accept()


def action_form(driver: Any, action: str) -> Any:
    return driver.find_element(By.CSS_SELECTOR, f"form[action*='/{action}?']")


async def test_open_a_run_see_each_attempt_signal_it_and_watch_it_complete(
    server: str, driver: Any, client: Client, worker_process: WorkerFactory
) -> None:
    """Issue 31: the run page's timeline draws each activity attempt (a retried one twice); a
    signal sent from its form completes the run, and the page shows it without reloading."""
    worker_process("ui-worker-1")
    await client.create_schedule(
        "nightly-report",
        flows.ClockFlow,
        spec=ScheduleSpec(cron_expressions=["0 3 * * *"]),
        task_queue="ui-nobody",
    )
    await client.start_workflow(
        flows.OrderFlow, "ada", id="ui-order-1", task_queue=flows.TASK_QUEUE
    )

    log_in(driver, server, OPERATOR, then="/ui/workflow?id=ui-order-1")
    arrive(driver, "/ui/runs/")
    # `flaky` fails its first attempt: two bars, the first failed, a backoff between them.
    wait(driver, 30).until(
        lambda d: d.find_elements(By.CSS_SELECTOR, "rect[data-kind=activity][data-attempt='2']")
    )
    # greet, flaky twice, blocking_add; the first flaky attempt failed, then its backoff.
    wait(driver).until(
        lambda d: len(d.find_elements(By.CSS_SELECTOR, "rect[data-kind=activity]")) >= 4
    )
    assert driver.find_elements(By.CSS_SELECTOR, "rect.bar-failed[data-kind=activity]")
    assert driver.find_elements(By.CSS_SELECTOR, "[data-kind=backoff]")
    wait(driver, 30).until(lambda d: d.find_elements(By.CSS_SELECTOR, "[data-kind=timer]"))

    driver.execute_script("window.stillTheSamePage = true")
    signal_form = action_form(driver, "signal")
    signal_form.find_element(By.NAME, "signal_name").send_keys("approve")
    signal_form.find_element(By.NAME, "args").send_keys('["alice"]')
    submit_confirmed(driver, signal_form)
    wait(driver).until(lambda d: "Signal sent" in d.find_element(By.ID, "action-outcome").text)
    wait(driver, 30).until(
        lambda d: d.find_element(By.ID, "run-status").text.strip() == "completed"
    )
    assert driver.execute_script("return window.stillTheSamePage === true")
    assert "alice" in driver.find_element(By.ID, "run-live").text  # the result, decoded
    browser.screenshot(driver, "run")
    assert_accessible(driver, "run")

    for page, name in (
        ("/ui/fleet", "fleet"),
        ("/ui/schedules", "schedules"),
        ("/ui/metrics", "metrics"),
    ):
        driver.get(f"{server}{page}")
        browser.screenshot(driver, name)
        assert_accessible(driver, name)
    driver.get(f"{server}/ui/fleet")
    assert "ui-worker-1" in driver.find_element(By.TAG_NAME, "main").text
    driver.get(f"{server}/ui/schedules/nightly-report")
    assert "0 3 * * *" in driver.find_element(By.TAG_NAME, "main").text
    browser.screenshot(driver, "schedule")
    assert_accessible(driver, "schedule")


async def test_terminate_a_run_and_be_refused_without_the_operator_role(
    server: str, driver: Any, client: Client
) -> None:
    """Issue 31: an operator terminates a run from its page (after confirming); a viewer sees
    the actions disabled, and a hand-made action post is refused with 403."""
    await client.start_workflow(flows.ClockFlow, id="ui-doomed", task_queue="ui-nobody")
    await client.start_workflow(flows.ClockFlow, id="ui-kept", task_queue="ui-nobody")

    log_in(driver, server, OPERATOR, then="/ui/workflow?id=ui-doomed")
    arrive(driver, "/ui/runs/")
    terminate = action_form(driver, "terminate")
    terminate.find_element(By.NAME, "reason").send_keys("closed from the UI")
    submit_confirmed(driver, terminate)
    wait(driver, 30).until(
        lambda d: d.find_element(By.ID, "run-status").text.strip() == "terminated"
    )
    described = await client.get_handle("ui-doomed").describe()
    assert described.run.status.value == "terminated"

    driver.find_element(By.CSS_SELECTOR, "form.logout button").click()
    arrive(driver, "/ui/login")
    wait(driver).until(lambda d: not any(c["name"] == "burrow_ui" for c in d.get_cookies()))
    log_in(driver, server, VIEWER, then="/ui/workflow?id=ui-kept")
    arrive(driver, "/ui/runs/")
    assert "needs the operator role" in driver.find_element(By.ID, "actions-note").text
    button = action_form(driver, "terminate").find_element(By.CSS_SELECTOR, "button")
    assert not button.is_enabled()
    # A viewer who builds the post by hand (with the page's own CSRF token) is refused.
    status = driver.execute_async_script(
        "const done = arguments[arguments.length - 1];"
        "const form = document.querySelector(\"form[action*='/terminate?']\");"
        "const body = new URLSearchParams({csrf: document.body.dataset.csrf, reason: 'x'});"
        "fetch(form.getAttribute('action'), {method: 'POST', body}).then(r => done(r.status));"
    )
    assert status == 403
    kept = await client.get_handle("ui-kept").describe()
    assert kept.run.status.value == "running"
