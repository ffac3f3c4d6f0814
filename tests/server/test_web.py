"""The chat page at / in headless Chromium (Debian's chromium and
chromium-driver through selenium): send a message, see a streamed reply, and
save a screenshot to $KVAD_BUILD_DIR/server_chat_page.png."""
import os
import shutil

import pytest

webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is missing (run scripts/setup)")

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def test_page_is_served(server):
    status, html = server.request("GET", "/")
    assert status == 200
    assert html.lstrip().startswith("<!doctype html>")
    assert "/v1/chat/completions" in html and "</html>" in html


def test_chat_page_streams_a_reply(server):
    if not (os.path.exists(CHROMIUM) and os.path.exists(CHROMEDRIVER)):
        pytest.skip("chromium / chromium-driver not installed (run scripts/setup)")
    from selenium.webdriver.chrome.service import Service
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait

    opts = webdriver.ChromeOptions()
    opts.binary_location = CHROMIUM
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1000,700"):
        opts.add_argument(a)
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=opts)
    try:
        driver.get(server.url + "/")
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "model").text == "smollm2-135m")
        driver.find_element(By.ID, "max_tokens").clear()
        driver.find_element(By.ID, "max_tokens").send_keys("24")
        driver.find_element(By.ID, "temperature").clear()
        driver.find_element(By.ID, "temperature").send_keys("0")
        driver.find_element(By.ID, "input").send_keys("What is the capital of France? Answer with one word.")
        driver.find_element(By.ID, "send").click()
        reply = WebDriverWait(driver, 300).until(
            lambda d: d.find_element(By.CSS_SELECTOR, ".msg.assistant[data-state=done]"))
        out_dir = os.environ.get("KVAD_BUILD_DIR") or os.getcwd()
        shot = os.path.join(out_dir, "server_chat_page.png")
        driver.save_screenshot(shot)
        print("screenshot:", shot)
        assert "Paris" in reply.text
        assert int(reply.get_attribute("data-chunks")) > 1  # the reply arrived in pieces
        assert driver.find_element(By.CSS_SELECTOR, ".msg.user").text == "What is the capital of France? Answer with one word."
        assert not driver.find_elements(By.CSS_SELECTOR, ".msg.error")
    finally:
        driver.quit()
