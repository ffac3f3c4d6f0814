"""kvad serve --image-model with real clients: the `openai` package's
images.generate, AUTOMATIC1111's /sdapi/v1 API over HTTP, and the web page's
Images tab in headless Chromium. The pipeline is the tiny random SD 1.5 one
(tests/fixtures/image_pipelines/sd15, tools/make_image_pipelines.py) at 64x64.

Pictures are checked against `kvad images make` with the same settings
(pixel for pixel, and the same A1111 `parameters` chunk) and against
diffusers' own picture for the same seed (tests/fixtures/painter, made by
tools/make_painter_fixtures.py with diffusers' StableDiffusionPipeline)."""
import base64
import json
import math
import os
import shutil
import socket
import struct
import subprocess
import threading
import time
import urllib.request
import zlib

import pytest

openai = pytest.importorskip("openai")

HERE = os.path.dirname(os.path.abspath(__file__))
FIXTURES = os.path.join(HERE, "..", "fixtures")
SD15 = os.path.normpath(os.path.join(FIXTURES, "image_pipelines", "sd15"))


# ------------------------------------------------------------------ PNG

def png_decode(data):
    """(width, height, rgb bytes, {text key: value}) of an 8-bit RGB PNG
    (PNG 1.2: IHDR, zlib-compressed IDAT rows, filter types 0-4, tEXt)."""
    assert data[:8] == b"\x89PNG\r\n\x1a\n", "not a PNG"
    at, idat, text, w, h = 8, b"", {}, 0, 0
    while at < len(data):
        n, kind = struct.unpack(">I4s", data[at:at + 8])
        chunk = data[at + 8:at + 8 + n]
        at += 12 + n
        if kind == b"IHDR":
            w, h, depth, color, _, _, interlace = struct.unpack(">IIBBBBB", chunk)
            assert (depth, color, interlace) == (8, 2, 0), "only 8-bit RGB, not interlaced"
        elif kind == b"IDAT":
            idat += chunk
        elif kind == b"tEXt":
            k, v = chunk.split(b"\0", 1)
            text[k.decode("latin-1")] = v.decode("latin-1")
        elif kind == b"IEND":
            break
    raw, stride, bpp = zlib.decompress(idat), w * 3, 3
    out, prev = bytearray(), bytearray(stride)
    for y in range(h):
        f, line = raw[y * (stride + 1)], bytearray(raw[y * (stride + 1) + 1:(y + 1) * (stride + 1)])
        for i in range(stride):
            a = line[i - bpp] if i >= bpp else 0
            b, c = prev[i], prev[i - bpp] if i >= bpp else 0
            if f == 1:
                line[i] = (line[i] + a) & 255
            elif f == 2:
                line[i] = (line[i] + b) & 255
            elif f == 3:
                line[i] = (line[i] + (a + b) // 2) & 255
            elif f == 4:
                p = a + b - c
                pa, pb, pc = abs(p - a), abs(p - b), abs(p - c)
                line[i] = (line[i] + (a if pa <= pb and pa <= pc else b if pb <= pc else c)) & 255
        out += line
        prev = line
    return w, h, bytes(out), text


def b64_png(s):
    return png_decode(base64.b64decode(s))


def psnr(a, b):
    mse = sum((x - y) ** 2 for x, y in zip(a, b)) / len(a)
    return float("inf") if mse == 0 else 10 * math.log10(255 ** 2 / mse)


def diffusers_image(key):
    """The uint8 [n, h, w, 3] picture `key` of tests/fixtures/painter/images.safetensors."""
    with open(os.path.join(FIXTURES, "painter", "images.safetensors"), "rb") as f:
        blob = f.read()
    n = struct.unpack("<Q", blob[:8])[0]
    meta = json.loads(blob[8:8 + n])[key]
    assert meta["dtype"] == "U8"
    lo, hi = meta["data_offsets"]
    return blob[8 + n + lo:8 + n + hi]


def images_make(tmp_path, prompt, *args):
    """`kvad images make` with the same pipeline: (w, h, rgb, text) of its PNG."""
    out = str(tmp_path / ("make%d.png" % len(os.listdir(tmp_path))))
    subprocess.run([os.environ["KVAD_BINARY"], "images", "make", prompt, "--model", SD15, "-t", "2", "-o", out] +
                   list(args), check=True, capture_output=True, timeout=120)
    with open(out, "rb") as f:
        return png_decode(f.read())


# ------------------------------------------------------------ servers

@pytest.fixture
def image_server(start_server):
    """An image model alone (no --model)."""
    return start_server("--image-model", SD15, text_model=False)


def client(server):
    return openai.OpenAI(base_url=server.url + "/v1", api_key="none", max_retries=0)


def progress(server):
    status, body = server.request("GET", "/sdapi/v1/progress")
    assert status == 200, body
    return json.loads(body)


def wait_progress(server, pred, timeout=60):
    deadline = time.time() + timeout
    while True:
        p = progress(server)
        if pred(p):
            return p
        assert time.time() < deadline, "progress never satisfied the condition: %r" % {**p, "current_image": "..."}
        time.sleep(0.02)


class RawRequest:
    """A POST sent on its own socket, read in a thread: .status/.body once it
    ended; .close() leaves without reading (a client that disconnects)."""

    def __init__(self, server, path, body):
        data = json.dumps(body).encode()
        self.sock = socket.create_connection(("127.0.0.1", server.port))
        self.sock.sendall(("POST %s HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                           "Content-Length: %d\r\nConnection: close\r\n\r\n" % (path, len(data))).encode() + data)
        self.status = None
        self.body = None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        buf = b""
        try:
            while True:
                got = self.sock.recv(65536)
                if not got:
                    break
                buf += got
        except OSError:
            return
        head, _, body = buf.partition(b"\r\n\r\n")
        if head:
            self.status = int(head.split()[1])
            self.body = body.decode()

    def wait(self, timeout=60):
        self.thread.join(timeout)
        assert not self.thread.is_alive(), "no answer in %d s" % timeout
        return self.status, self.body

    def close(self):
        self.sock.shutdown(socket.SHUT_RDWR)
        self.sock.close()


LONG = {"prompt": "a long job", "width": 64, "height": 64, "steps": 1000, "seed": 1}


def interrupt(server):
    req = urllib.request.Request(server.url + "/sdapi/v1/interrupt", data=b"", method="POST")
    with urllib.request.urlopen(req, timeout=30) as r:  # no body, no Content-Type, as A1111's clients send it
        assert r.status == 200


# -------------------------------------------------------------- tests

def test_openai_client_paints_what_images_make_paints(image_server, tmp_path):
    r = client(image_server).images.generate(model="sd15", prompt="a red fox in fresh snow", size="64x64",
                                             response_format="b64_json", extra_body={"steps": 2, "seed": 7})
    assert len(r.data) == 1 and r.created > 0
    w, h, rgb, text = b64_png(r.data[0].b64_json)
    mw, mh, mrgb, mtext = images_make(tmp_path, "a red fox in fresh snow", "--width", "64", "--height", "64",
                                      "--steps", "2", "--seed", "7")
    assert (w, h) == (mw, mh) == (64, 64)
    assert rgb == mrgb
    assert text["parameters"] == mtext["parameters"]
    assert "Steps: 2" in text["parameters"] and "Seed: 7" in text["parameters"]


def test_same_seed_gives_diffusers_picture(image_server):
    # diffusers' StableDiffusionPipeline with EulerDiscreteScheduler, 4 steps, seed 42, guidance 7.5.
    status, body = image_server.request("POST", "/v1/images/generations", {
        "prompt": "a photo of a cat", "size": "64x64", "steps": 4, "seed": 42, "cfg_scale": 7.5,
        "scheduler": "euler", "response_format": "b64_json", "output_format": "png"})
    assert status == 200, body
    j = json.loads(body)
    assert j["size"] == "64x64" and j["output_format"] == "png"
    _, _, rgb, _ = b64_png(j["data"][0]["b64_json"])
    p = psnr(rgb, diffusers_image("sd15.euler.64x64.s42.n1"))
    print("PSNR vs diffusers: %.1f dB" % p)
    assert p >= 60


def test_a1111_txt2img(image_server, tmp_path):
    status, body = image_server.request("POST", "/sdapi/v1/txt2img", {
        "prompt": "a red fox in fresh snow", "negative_prompt": "blurry", "steps": 2, "cfg_scale": 6, "width": 64,
        "height": 64, "seed": 7, "sampler_name": "Euler a", "batch_size": 1, "n_iter": 2,
        "restore_faces": False, "enable_hr": False})
    assert status == 200, body
    j = json.loads(body)
    assert len(j["images"]) == 2
    info = json.loads(j["info"])
    assert info["all_seeds"] == [7, 8] and info["seed"] == 7 and info["sampler_name"] == "Euler a"
    assert j["parameters"]["steps"] == 2 and j["parameters"]["restore_faces"] is False
    for img, seed in zip(j["images"], (7, 8)):
        _, _, rgb, text = b64_png(img)
        _, _, mrgb, mtext = images_make(tmp_path, "a red fox in fresh snow", "--width", "64", "--height", "64",
                                        "--steps", "2", "--seed", str(seed), "--cfg", "6", "--negative-prompt",
                                        "blurry", "--scheduler", "euler_a")
        assert rgb == mrgb
        assert text["parameters"] == mtext["parameters"]
    assert info["infotexts"][1] == mtext["parameters"]

    # seed -1: a random seed, reported, that paints the same picture again
    status, body = image_server.request("POST", "/sdapi/v1/txt2img", {"prompt": "x", "steps": 1, "seed": -1})
    assert status == 200, body
    seed = json.loads(json.loads(body)["info"])["seed"]
    assert isinstance(seed, int) and seed >= 0
    again = json.loads(image_server.request("POST", "/sdapi/v1/txt2img", {"prompt": "x", "steps": 1, "seed": seed})[1])
    assert again["images"] == json.loads(body)["images"]


def test_a1111_lists(image_server):
    status, body = image_server.request("GET", "/sdapi/v1/samplers")
    assert status == 200
    names = [s["name"] for s in json.loads(body)]
    assert {"Euler", "Euler a", "DDIM", "DPM++ 2M", "DPM++ 2M Karras"} <= set(names)
    for name in names:  # every name it lists is one txt2img takes
        status, body = image_server.request("POST", "/sdapi/v1/txt2img", {"prompt": "x", "steps": 2, "sampler_name": name})
        assert status == 200, (name, body)
        assert json.loads(json.loads(body)["info"])["sampler_name"] == name
    status, body = image_server.request("GET", "/sdapi/v1/sd-models")
    assert status == 200 and json.loads(body)[0]["model_name"] == "sd15"
    status, body = image_server.request("GET", "/sdapi/v1/options")
    assert status == 200 and json.loads(body)["sd_model_checkpoint"] == "sd15"
    assert progress(image_server)["current_image"] is None  # idle
    assert progress(image_server)["state"]["job_count"] == 0


@pytest.mark.parametrize("path,body,param", [
    ("/v1/images/generations", {"prompt": "x", "size": "4096x4096"}, "4096"),
    ("/v1/images/generations", {"prompt": "x", "steps": 0}, "steps 0"),
    ("/v1/images/generations", {"prompt": "x", "steps": 1000000}, "steps 1000000"),
    ("/v1/images/generations", {"prompt": "x", "n": 100}, "100"),
    ("/v1/images/generations", {"prompt": "x" * (1 << 20)}, "bytes"),
    ("/v1/images/generations", {"prompt": "x", "size": "100x100"}, "multiple of 8"),
    ("/v1/images/generations", {"prompt": "x", "size": "big"}, "size"),
    ("/v1/images/generations", {"prompt": "x", "response_format": "url"}, "b64_json"),
    ("/v1/images/generations", {"prompt": "x", "output_format": "jpeg"}, "png"),
    ("/v1/images/generations", {"prompt": "x", "scheduler": "bogus"}, "unknown scheduler"),
    ("/v1/images/generations", {"prompt": "x", "cfg_scale": 1e9}, "cfg"),
    ("/v1/images/generations", {"size": "64x64"}, "prompt"),
    ("/v1/images/generations", {"prompt": "x", "seed": "seven"}, "seed"),
    ("/sdapi/v1/txt2img", {"prompt": "x", "width": 4096, "height": 4096}, "4096"),
    ("/sdapi/v1/txt2img", {"prompt": "x", "batch_size": 8, "n_iter": 8}, "n_iter"),
    ("/sdapi/v1/txt2img", {"prompt": "x", "sampler_name": "Heun"}, "Heun"),
    ("/sdapi/v1/txt2img", {"prompt": "x", "steps": 1001}, "steps"),
])
def test_bounds_are_400(image_server, path, body, param):
    status, text = image_server.request("POST", path, body)
    assert status == 400, text
    msg = json.loads(text)["error"]["message"]
    assert "\n" not in msg and param in msg, msg
    m = image_server.metrics()
    assert m['kvad_image_jobs_total{outcome="done"}'] == 0 and m["kvad_image_step_seconds_count"] == 0


def test_openai_client_bounds(image_server):
    with pytest.raises(openai.BadRequestError, match="kvad returns images as b64_json only"):
        client(image_server).images.generate(model="sd15", prompt="x", response_format="url")
    with pytest.raises(openai.NotFoundError):
        client(image_server).images.generate(model="dall-e-3", prompt="x", extra_body={"steps": 1})


def test_progress_preview_and_interrupt(image_server):
    job = RawRequest(image_server, "/sdapi/v1/txt2img", LONG)
    p = wait_progress(image_server, lambda p: p["state"]["sampling_step"] >= 2)
    assert p["state"]["sampling_steps"] == 1000 and p["state"]["job_count"] == 1
    assert 0 < p["progress"] < 1 and p["eta_relative"] > 0
    w, h, rgb, _ = b64_png(p["current_image"])  # the latent preview: one pixel per latent pixel
    assert (w, h) == (8, 8) and len(rgb) == 8 * 8 * 3
    t0 = time.time()
    interrupt(image_server)
    status, body = job.wait(30)
    print("interrupt to answer: %.2f s" % (time.time() - t0))
    assert status == 200, body
    assert json.loads(body)["images"] == []  # stopped in its only batch
    p = progress(image_server)
    assert p["state"]["job_count"] == 0 and p["current_image"] is None
    m = image_server.metrics()
    assert m['kvad_image_jobs_total{outcome="cancelled"}'] == 1 and m["kvad_images_generated_total"] == 0
    # interrupted on the OpenAI route: 409
    job = RawRequest(image_server, "/v1/images/generations", {"prompt": "x", "steps": 1000, "size": "64x64"})
    wait_progress(image_server, lambda p: p["state"]["sampling_step"] >= 1)
    interrupt(image_server)
    status, body = job.wait(30)
    assert status == 409 and json.loads(body)["error"]["code"] == "interrupted"


def test_disconnect_cancels(image_server):
    job = RawRequest(image_server, "/v1/images/generations", {"prompt": "x", "steps": 1000, "size": "64x64"})
    wait_progress(image_server, lambda p: p["state"]["sampling_step"] >= 1)
    job.close()
    p = wait_progress(image_server, lambda p: p["state"]["job_count"] == 0, timeout=10)
    assert p["state"]["sampling_step"] < 1000
    m = image_server.wait_metric('kvad_image_jobs_total{outcome="cancelled"}', lambda v: v == 1)
    assert image_server.metrics()["kvad_images_generated_total"] == 0
    # the painter is free again
    status, body = image_server.request("POST", "/v1/images/generations", {"prompt": "x", "steps": 1})
    assert status == 200, body


def test_full_queue_is_503(start_server):
    s = start_server("--image-model", SD15, "--image-queue", "1", text_model=False)
    first = RawRequest(s, "/sdapi/v1/txt2img", LONG)
    wait_progress(s, lambda p: p["state"]["sampling_step"] >= 1)
    second = RawRequest(s, "/sdapi/v1/txt2img", {**LONG, "steps": 1})  # waits behind it
    wait_progress(s, lambda p: p["state"]["job_count"] == 2)
    assert s.metrics()["kvad_image_jobs_queued"] == 1 and s.metrics()["kvad_image_jobs_running"] == 1
    status, body = s.request("POST", "/sdapi/v1/txt2img", {"prompt": "x", "steps": 1})
    assert status == 503 and json.loads(body)["error"]["code"] == "queue_full", body
    interrupt(s)
    assert first.wait(30)[0] == 200
    status, body = second.wait(30)
    assert status == 200 and len(json.loads(body)["images"]) == 1


def test_text_is_served_while_a_picture_paints(start_server):
    s = start_server("--image-model", SD15, "--parallel", "2", "--ctx-size", "256")
    status, body = s.request("GET", "/v1/models")
    models = {m["id"]: m for m in json.loads(body)["data"]}
    assert models["sd15"]["kind"] == "image" and "kind" not in models["smollm2-135m"]
    job = RawRequest(s, "/sdapi/v1/txt2img", LONG)
    wait_progress(s, lambda p: p["state"]["sampling_step"] >= 1)
    t0 = time.time()
    r = openai.OpenAI(base_url=s.url + "/v1", api_key="none", max_retries=0).chat.completions.create(
        model="smollm2-135m", messages=[{"role": "user", "content": "Say hi."}], max_tokens=8, temperature=0)
    took = time.time() - t0
    assert r.choices[0].message.content
    p = progress(s)
    print("chat answered in %.2f s while the picture was at step %d of 1000" % (took, p["state"]["sampling_step"]))
    assert p["state"]["job_count"] == 1 and p["state"]["sampling_step"] < 1000  # still painting
    interrupt(s)
    assert job.wait(30)[0] == 200
    assert s.metrics()["kvad_image_step_seconds_count"] >= 1


def test_image_only_server_refuses_text_routes(image_server):
    status, body = image_server.request("GET", "/v1/models")
    data = json.loads(body)["data"]
    assert [(m["id"], m["kind"]) for m in data] == [("sd15", "image")]
    for path, req in (("/v1/chat/completions", {"model": "sd15", "messages": [{"role": "user", "content": "hi"}]}),
                      ("/v1/completions", {"prompt": "hi"}), ("/api/chat", {"model": "sd15"}), ("/props", None)):
        status, body = image_server.request("POST" if req else "GET", path, req)
        assert status == 400, (path, body)
        assert "only the image model 'sd15'" in body
    assert image_server.request("GET", "/health")[0] == 200
    assert image_server.request("GET", "/nope")[0] == 404


def test_text_only_server_has_no_image_routes(server):
    status, body = server.request("POST", "/v1/images/generations", {"prompt": "x"})
    assert status == 400 and "--image-model" in json.loads(body)["error"]["message"]
    assert server.request("GET", "/sdapi/v1/progress")[0] == 400


def test_metrics(image_server):
    status, _ = image_server.request("POST", "/v1/images/generations", {"prompt": "x", "steps": 3, "n": 2})
    assert status == 200
    m = image_server.metrics()
    assert m["kvad_images_generated_total"] == 2
    assert m['kvad_image_jobs_total{outcome="done"}'] == 1
    assert m["kvad_image_jobs_queued"] == 0 and m["kvad_image_jobs_running"] == 0
    assert m["kvad_image_step_seconds_count"] == 3 and m['kvad_image_step_seconds_bucket{le="+Inf"}'] == 3
    assert m["kvad_image_step_seconds_sum"] > 0
    assert m['kvad_requests_total{endpoint="/v1/images/generations",status="200"}'] == 1


CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
CHROMEDRIVER = shutil.which("chromedriver") or "/usr/bin/chromedriver"


def test_web_page_images_tab(image_server):
    webdriver = pytest.importorskip("selenium.webdriver", reason="selenium is missing (run scripts/setup)")
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
        driver.get(image_server.url + "/")
        WebDriverWait(driver, 30).until(lambda d: d.find_element(By.ID, "model").text == "sd15")
        assert driver.find_element(By.ID, "images_view").is_displayed()  # no text model: the Images tab
        assert not driver.find_element(By.ID, "tab_chat").is_enabled()
        driver.find_element(By.ID, "image_prompt").send_keys("a red fox in fresh snow")
        driver.find_element(By.ID, "image_size").send_keys("128x128")
        driver.find_element(By.ID, "image_steps").clear()
        driver.find_element(By.ID, "image_steps").send_keys("150")
        driver.find_element(By.ID, "image_seed").clear()
        driver.find_element(By.ID, "image_seed").send_keys("7")
        driver.find_element(By.ID, "generate").click()
        # progress from /sdapi/v1/progress while it paints
        WebDriverWait(driver, 60).until(
            lambda d: int(d.find_element(By.ID, "image_status").get_attribute("data-step") or 0) > 0)
        WebDriverWait(driver, 300).until(
            lambda d: d.find_element(By.ID, "image_out").get_attribute("data-state") in ("done", "error"))
        out = driver.find_element(By.ID, "image_out")
        assert out.get_attribute("data-state") == "done", driver.find_element(By.ID, "image_status").text
        shot = os.path.join(os.environ.get("KVAD_BUILD_DIR") or os.getcwd(), "server_image_page.png")
        driver.save_screenshot(shot)
        print("screenshot:", shot)
        src = out.get_attribute("src")
        w, h, _, text = b64_png(src.split(",", 1)[1])
        assert (w, h) == (128, 128) and "Seed: 7" in text["parameters"] and "Steps: 150" in text["parameters"]
        assert "128x128" in driver.find_element(By.ID, "image_status").text
    finally:
        driver.quit()
