"""Hostile clients against the real server (the HTTP layer): each
attack is bigger than the bound it meets, and the test asserts the status,
the time taken and, where memory is the point, the server's RSS before and
after (from /proc/PID/status). Loopback only; every loop and wait is bounded."""
import json
import os
import socket
import subprocess
import threading
import time
import zlib

import pytest

from conftest import MODEL_NAME, model_path

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"
MB = 1 << 20


def warm_rss_mb(server):
    """RSS once the weights have been touched (a first request pages them in)."""
    ok(server)
    return rss_mb(server)


def rss_mb(server):
    with open("/proc/%d/status" % server.proc.pid) as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    raise AssertionError("no VmRSS")


def connect(server, timeout=10):
    return socket.create_connection(("127.0.0.1", server.port), timeout=timeout)


def read_response(s, limit=1 << 20):
    """Reads until the peer closes or the head and a Content-Length body are in."""
    buf = b""
    while len(buf) < limit:
        try:
            part = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not part:
            break
        buf += part
        head, sep, body = buf.partition(b"\r\n\r\n")
        if sep:
            for line in head.split(b"\r\n"):
                if line.lower().startswith(b"content-length:") and len(body) >= int(line.split(b":")[1]):
                    return buf
    return buf


def status_of(resp):
    assert resp.startswith(b"HTTP/1.1 "), resp[:200]
    return int(resp.split(b" ", 2)[1])


def header_block(path, headers, method="POST"):
    h = "%s %s HTTP/1.1\r\nHost: 127.0.0.1\r\n" % (method, path)
    h += "".join("%s: %s\r\n" % kv for kv in headers.items())
    return (h + "\r\n").encode()


def blast(s, total, chunk=b"x" * MB):
    """Sends up to `total` bytes; returns how many went before the server closed."""
    sent = 0
    try:
        while sent < total:
            s.sendall(chunk)
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    return sent


def refused_unread(server, path, headers, body):
    """Sends the headers, reads the answer, then offers the body: returns
    (status, answer bytes, body bytes the server took before closing)."""
    s = connect(server)
    s.sendall(header_block(path, headers))
    resp = read_response(s)
    sent = 0
    try:
        for i in range(0, len(body), MB):
            s.sendall(body[i:i + MB])
            sent += len(body[i:i + MB])
        time.sleep(0.2)
        s.sendall(body[:MB] or b"x")
        sent += MB
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    s.close()
    return status_of(resp), resp, sent


@pytest.fixture
def small(start_server):
    return start_server("--parallel", "1", "--queue", "2", "--ctx-size", "512", "--request-timeout", "2")


def ok(server):
    st, text = server.request("POST", COMPLETIONS, body={"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1})
    assert st == 200, text


# ------------------------------------------------------------- bodies (1)

def test_chunked_200mb_body_is_refused_unread(small):
    before = warm_rss_mb(small)
    t0 = time.time()
    s = connect(small)
    s.sendall(header_block(CHAT, {"Content-Type": "application/json", "Transfer-Encoding": "chunked"}))
    # The answer comes before any body byte is sent...
    resp = read_response(s)
    assert status_of(resp) == 501 and b"unsupported_transfer_encoding" in resp
    # ...and the connection is closed: 200 MB of chunks cannot go in.
    sent = blast(s, 200 * MB, b"100000\r\n" + b"[" * 0x100000 + b"\r\n")
    s.close()
    print("chunked: %d MB taken, %.2f s, RSS %+.1f MB" % (sent >> 20, time.time() - t0, rss_mb(small) - before))
    assert sent < 200 * MB  # refused unread: the time it took is printed, not asserted
    assert rss_mb(small) - before < 20
    ok(small)


def test_gzip_bomb_is_refused_uninflated(small):
    z = zlib.compressobj(9, zlib.DEFLATED, 31)  # gzip framing
    zero = bytes(16 * MB)
    bomb = b"".join(z.compress(zero) for _ in range(64)) + z.flush()  # 1 GiB of zeros
    assert len(bomb) < 2 * MB
    before = warm_rss_mb(small)
    t0 = time.time()
    st, resp, sent = refused_unread(small, CHAT, {"Content-Type": "application/json", "Content-Encoding": "gzip",
                                                  "Content-Length": str(len(bomb))}, bomb)
    assert st == 415 and b"unsupported_content_encoding" in resp
    print("gzip bomb: %.2f s, RSS %+.1f MB" % (time.time() - t0, rss_mb(small) - before))
    assert sent < len(bomb) + MB
    assert rss_mb(small) - before < 20
    ok(small)


def test_post_without_length_or_over_the_limit(small):
    # No Content-Length (a body up to EOF, HTTP/1.0 style): 411 before reading it.
    s = connect(small)
    s.sendall(b"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\r\n")
    resp = read_response(s)
    assert status_of(resp) == 411
    s.close()
    # A Content-Length of 64 GB: 413 at once, the body never read.
    before = warm_rss_mb(small)
    t0 = time.time()
    s = connect(small)
    s.sendall(header_block(COMPLETIONS, {"Content-Type": "application/json", "Content-Length": str(64 << 30)}))
    resp = read_response(s)
    assert status_of(resp) == 413 and b"payload_too_large" in resp
    assert blast(s, 200 * MB) < 200 * MB
    s.close()
    print("64 GB Content-Length: %.2f s" % (time.time() - t0))
    assert rss_mb(small) - before < 20
    # Any path: a GET with a chunked body too.
    s = connect(small)
    s.sendall(header_block("/health", {"Transfer-Encoding": "chunked"}, method="GET"))
    assert status_of(read_response(s)) == 501
    s.close()
    ok(small)


# --------------------------------------------------- cheap rejection (2)

def test_16mb_of_brackets(small):
    before = warm_rss_mb(small)
    t0 = time.time()
    # The depth limit refuses it as it parses (a hang guard, not a time bound: 10x what it takes here).
    st, text = small.request("POST", CHAT, raw=b"[" * (16 * 1000 * 1000), timeout=30)
    assert st == 400 and "invalid_json" in text and "nested" in text
    print("16 MB of [: %.2f s, RSS %+.1f MB" % (time.time() - t0, rss_mb(small) - before))
    assert rss_mb(small) - before < 60  # the 16 MB body itself, not 600 MB of JSON nodes
    over = b"[" * (17 * MB)  # over the body limit
    st, resp, sent = refused_unread(small, CHAT, {"Content-Type": "application/json",
                                                  "Content-Length": str(len(over))}, over)
    assert st == 413 and sent < len(over)
    ok(small)


def test_huge_prompts_are_refused_before_tokenizing(small):
    big = "hello world " * (4 * MB // 12)
    before = warm_rss_mb(small)
    t0 = time.time()
    for i in range(30):
        if i % 2:
            body = {"model": MODEL_NAME, "messages": [{"role": "user", "content": big}], "max_tokens": 1}
            path = CHAT
        else:
            body = {"model": MODEL_NAME, "prompt": big, "max_tokens": 1}
            path = COMPLETIONS
        st, text = small.request("POST", path, body=body)
        assert st == 400 and "context_length_exceeded" in text, text[:300]
    elapsed = time.time() - t0
    time.sleep(0.5)  # the watchdog's next tick trims the freed bodies
    after = rss_mb(small)
    print("30 x 4 MB prompts: %.2f s, RSS %.1f -> %.1f MB" % (elapsed, before, after))
    assert after - before < 60, (before, after)
    # Many tiny messages: refused by count, not rendered.
    msgs = [{"role": "user", "content": ""}] * 100000
    t0 = time.time()
    st, text = small.request("POST", CHAT, body={"model": MODEL_NAME, "messages": msgs}, timeout=60)
    assert st == 400 and "context_length_exceeded" in text
    print("100000 empty messages: %.2f s" % (time.time() - t0))
    ok(small)


# ------------------------------------------------------ connections (3)

def test_slowloris_does_not_starve_health(small):
    conns = []
    for _ in range(40):
        s = connect(small)
        s.sendall(b"GET /health HTTP/1.1\r\n")
        conns.append(s)
    stop = threading.Event()

    def dribble():
        while not stop.is_set():
            for s in conns:
                try:
                    s.sendall(b"X-a: b\r\n")
                except OSError:
                    pass
            time.sleep(0.3)

    t = threading.Thread(target=dribble, daemon=True)
    t.start()
    try:
        worst = 0.0
        for _ in range(10):
            t0 = time.time()
            st, _ = small.request("GET", "/health", timeout=5)
            worst = max(worst, time.time() - t0)
            assert st == 200
            time.sleep(0.2)
        print("slowloris x40: /health worst %.3f s" % worst)
        assert worst < 1.0, worst
        # The request deadline (--request-timeout 2) closes every slow connection.
        deadline = time.time() + 10
        closed = 0
        for s in conns:
            s.settimeout(max(0.1, deadline - time.time()))
            try:
                while s.recv(4096):
                    pass
                closed += 1
            except (ConnectionResetError, BrokenPipeError):
                closed += 1
            except socket.timeout:
                pass
        assert closed == 40
    finally:
        stop.set()
        t.join(timeout=5)
        for s in conns:
            s.close()
    ok(small)


def test_more_connections_than_threads_get_503(start_server):
    # --parallel 1 --queue 2: 67 HTTP threads; 150 connections that never finish their headers.
    # (Connecting takes seconds: cpp-httplib listens with a backlog of 5.)
    # A 60 s deadline, which the test never waits for: the checks below need
    # every held connection still held, and connecting 150 took 10.6 s on a
    # 2-core machine running another CI job (with a 10 s deadline it failed).
    small = start_server("--parallel", "1", "--queue", "2", "--ctx-size", "128", "--request-timeout", "60")
    conns = []
    t0 = time.time()
    for _ in range(150):
        s = connect(small)
        s.sendall(b"GET /health HTTP/1.1\r\nX-a: b\r\n")
        conns.append(s)
    # Answered while every held connection still holds its thread: before the
    # deadline could free any (the check below), not by a time bound of its
    # own (1 s was exceeded on a loaded 2-core machine: 1.02 s).
    worst = 0.0
    for _ in range(5):
        t1 = time.time()
        assert small.request("GET", "/health", timeout=5)[0] == 200
        worst = max(worst, time.time() - t1)  # printed below, not asserted
    time.sleep(0.3)
    assert time.time() - t0 < 59.5  # before the 60 s deadline could close any of them
    answered = refused = 0
    for s in conns:
        s.setblocking(False)
        try:
            data = s.recv(4096)
            refused += 1  # closed by the server (EOF)
            answered += b"503 Service Unavailable" in data
        except BlockingIOError:
            pass  # still open: within the bound
        except ConnectionResetError:
            refused += 1
        s.close()
    print("150 conns: refused %d (503 read by %d), /health worst %.3f s" % (refused, answered, worst))
    assert refused >= 150 - 67, (refused, answered)
    assert answered > 0
    ok(small)


@pytest.mark.parametrize("flood", [b"X-a: b\r\n" * 131072, b"a" * MB], ids=["many_headers", "endless_line"])
def test_header_flood_is_cut_off(small, flood):
    before = warm_rss_mb(small)
    s = connect(small, timeout=2)
    s.sendall(b"GET /health HTTP/1.1\r\nHost: 127.0.0.1\r\n")
    t0 = time.time()
    sent = 0
    try:
        while sent < 300 * MB and time.time() - t0 < 8:
            s.sendall(flood)
            sent += len(flood)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    peak = rss_mb(small)
    s.close()
    print("header flood: %d MB taken, RSS %+.1f MB" % (sent >> 20, peak - before))
    assert sent < 100 * MB, sent  # the server stopped reading: 64 KB of headers at most
    assert peak - before < 60, (before, peak)
    assert small.request("GET", "/health", timeout=5)[0] == 200


# ------------------------------------------------------ browsers (7, 8)

def test_host_allow_list_and_cors(start_server):
    server = start_server("--parallel", "1", "--ctx-size", "128", "--cors-origin", "http://app.example")
    body = json.dumps({"model": MODEL_NAME, "prompt": "Hi", "max_tokens": 1}).encode()
    # DNS rebinding: a page at evil.example resolving to 127.0.0.1.
    st, text = server.request("POST", COMPLETIONS, raw=body, headers={"Host": "evil.example:%d" % server.port})
    assert st == 403 and "host_not_allowed" in text
    for host in ("localhost:%d" % server.port, "127.0.0.1", "[::1]:%d" % server.port):
        assert server.request("GET", "/health", headers={"Host": host})[0] == 200
    # A page from another origin cannot post; a text/plain "simple" POST is refused too.
    st, text = server.request("POST", COMPLETIONS, raw=body, headers={"Origin": "http://evil.example"})
    assert st == 403 and "origin_not_allowed" in text
    st, text = server.request("POST", COMPLETIONS, raw=body, headers={"Content-Type": "text/plain"})
    assert st == 415
    # The server's own page (same origin) and the allowed origin may.
    st, _ = server.request("POST", COMPLETIONS, raw=body, headers={"Origin": "http://127.0.0.1:%d" % server.port})
    assert st == 200
    s = connect(server)
    s.sendall(header_block(COMPLETIONS, {"Origin": "http://app.example", "Access-Control-Request-Method": "POST"},
                           method="OPTIONS"))
    resp = read_response(s)
    s.close()
    assert status_of(resp) == 204
    assert b"Access-Control-Allow-Origin: http://app.example" in resp
    assert b"Authorization" in resp
    st, _ = server.request("POST", COMPLETIONS, raw=body, headers={"Origin": "http://app.example"})
    assert st == 200


def test_cors_off_by_default_and_options_answered(small):
    s = connect(small)
    s.sendall(header_block(CHAT, {}, method="OPTIONS"))
    resp = read_response(s)
    s.close()
    assert status_of(resp) == 204 and b"Access-Control-Allow-Origin" not in resp
    s = connect(small)
    s.sendall(header_block(CHAT, {"Origin": "http://evil.example"}, method="OPTIONS"))
    resp = read_response(s)
    s.close()
    assert status_of(resp) == 403 and b"Access-Control-Allow-Origin" not in resp


def test_api_key_from_the_environment_guards_every_path(start_server, monkeypatch):
    monkeypatch.setenv("KVAD_API_KEY", "k" * 40)
    server = start_server("--parallel", "1", "--ctx-size", "128")
    for path in ("/", "/metrics", "/v1/models", "/nothing"):
        assert server.request("GET", path)[0] == 401, path
    assert server.request("GET", "/health")[0] == 200
    good = {"Authorization": "Bearer " + "k" * 40}
    assert server.request("GET", "/metrics", headers=good)[0] == 200
    assert server.request("GET", "/v1/models", headers={"Authorization": "Bearer " + "k" * 39 + "j"})[0] == 401
    assert server.request("GET", "/v1/models", headers={"Authorization": "Bearer " + "k" * 41})[0] == 401
    # Refused before the body is read.
    s = connect(server)
    s.sendall(header_block(CHAT, {"Content-Type": "application/json", "Content-Length": str(15 * MB)}))
    assert status_of(read_response(s)) == 401
    s.close()


# ----------------------------------------------------------- ranges (9)

def test_multipart_ranges_do_not_amplify(small):
    page = small.request("GET", "/")[1].encode()
    ranges = "bytes=" + ",".join(["0-"] * 1000)
    s = connect(small)
    s.sendall(header_block("/", {"Range": ranges}, method="GET"))
    resp = read_response(s, limit=64 * MB)
    s.close()
    assert status_of(resp) == 200
    assert len(resp) < len(page) + 4096, len(resp)


# ----------------------------------------------------- access log (14)

def test_access_log_is_sanitised(small):
    s = connect(small)
    s.sendall(b"GET /a%0aINJECTED%1b[31m HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
    assert status_of(read_response(s)) == 404
    s.close()
    ok(small)
    time.sleep(0.3)
    log = open(small.log_path, encoding="utf-8", errors="replace").read()
    assert "\x1b" not in log
    assert not any(line.startswith("INJECTED") for line in log.splitlines())
    assert "/a\\x0aINJECTED\\x1b[31m" in log


# ---------------------------------------------------------- CLI (15)

@pytest.mark.parametrize("args", [["--queue", "100000000"], ["--queue", "-1"], ["--parallel", "100000"],
                                  ["--parallel", "0"], ["--ctx-size", "-5"], ["--ctx-size", "100000000"],
                                  ["--request-timeout", "0"]])
def test_cli_limits_are_validated(args):
    binary = os.environ.get("KVAD_BINARY")
    if not binary or model_path() is None:
        pytest.skip("no kvad binary or model")
    t0 = time.time()
    r = subprocess.run([binary, "serve", "--model", model_path(), "--port", "0"] + args,
                       capture_output=True, text=True, timeout=30)
    assert r.returncode != 0
    assert r.stderr.startswith("kvad: error: "), r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    print("%s: refused in %.2f s" % (" ".join(args), time.time() - t0))


# ------------------------------------------------- half-closed sockets (5)

# cpp-httplib 0.11.4 cannot: SocketStream::write() first calls
# detail::is_socket_alive(), which peeks and takes the client's FIN for a
# closed connection, so nothing is written to a half-closed socket (and kvad's
# handler, which sees the same FIN as POLLRDHUP, cancels the generation).
# Strict xfail: this test starts failing (XPASS) once the library can.
@pytest.mark.xfail(strict=True, reason="cpp-httplib 0.11.4 writes nothing to a half-closed socket")
@pytest.mark.parametrize("stream", [False, True])
def test_half_closed_client_gets_its_answer(small, stream):
    body = json.dumps({"model": MODEL_NAME, "prompt": "1, 2, 3,", "max_tokens": 8, "temperature": 0,
                       "stream": stream}).encode()
    s = connect(small, timeout=60)
    s.sendall(header_block(COMPLETIONS, {"Content-Type": "application/json", "Content-Length": str(len(body)),
                                         "Connection": "close"}) + body)
    s.shutdown(socket.SHUT_WR)  # done sending; still reading
    buf = b""
    while True:
        part = s.recv(65536)
        if not part:
            break
        buf += part
    s.close()
    final = buf
    while final.startswith(b"HTTP/1.1 100"):  # the server's interim probe
        final = final.split(b"\r\n\r\n", 1)[1]
    assert status_of(final) == 200, buf[:500]
    if stream:
        assert b"[DONE]" in final
    else:
        assert json.loads(final.split(b"\r\n\r\n", 1)[1])["usage"]["completion_tokens"] == 8
