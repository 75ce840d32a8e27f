"""Abusive local clients of the operator's webhook server (loopback only): oversized reviews in
numbers, chunked ones, 100 000-deep JSON, and a slow-loris while valid reviews come. Run with
our engine and, for comparison, with PyPI's Kopf 1.45.2; the operator's memory is measured."""

from __future__ import annotations

import concurrent.futures
import json
import socket
import time
from pathlib import Path

import pytest
from support.network import free_port
from support.operators import OperatorProcess, write_script

HANDLERS = """
import kopf

@kopf.on.startup()
def configure(settings, **_):
    settings.admission.server = kopf.WebhookServer(insecure=True, host='127.0.0.1', port=PORT)

@kopf.on.validate('greetings')
def check(spec, **_):
    if spec.get('mood') == 'grumpy':
        raise kopf.AdmissionError("No grumpy greetings, please.")
"""

REVIEW = json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "request": {
    "uid": "u-1", "operation": "CREATE", "userInfo": {"username": "tester"},
    "resource": {"group": "demo.kopf.dev", "version": "v1", "resource": "greetings"},
    "object": {"apiVersion": "demo.kopf.dev/v1", "kind": "Greeting",
               "metadata": {"name": "x", "namespace": "default"}, "spec": {"mood": "fine"}}}}).encode()
BIG = 15 * 1024 * 1024


def memory(pid: int) -> tuple[float, float]:
    """The process's resident memory now and at its peak, MiB."""
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return int(fields["VmRSS"].split()[0]) / 1024, int(fields["VmHWM"].split()[0]) / 1024


def send(port: int, head: bytes, body: bytes = b"", *, pause: float = 0.0) -> tuple[int | None, float]:
    """A raw request; the status code (None: the connection closed without one), and the time."""
    started = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=60) as sock:
        try:
            sock.sendall(head)
            if pause:
                time.sleep(pause)
            for offset in range(0, len(body), 1 << 20):
                sock.sendall(body[offset:offset + (1 << 20)])
        except OSError:
            pass  # refused before the body was all sent
        response = b""
        try:
            while chunk := sock.recv(65536):
                response += chunk
                if b"\r\n" in response:
                    break
        except OSError:
            pass
    status = int(response[9:12]) if response.startswith(b"HTTP/1.") else None
    return status, time.monotonic() - started


def post_head(length: int | None) -> bytes:
    size = f"Content-Length: {length}" if length is not None else "Transfer-Encoding: chunked"
    return f"POST /check HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n{size}\r\n\r\n".encode()


@pytest.mark.parametrize("engine", ["ours", "kopf"])
def test_abusive_clients_are_refused_within_bounds(crd: None, namespace: str, tmp_path: Path,
                                                   reference_kopf: Path, engine: str) -> None:
    port = free_port()
    script = write_script(tmp_path, f"PORT = {port}\n" + HANDLERS)
    operator = OperatorProcess(["run", "-n", namespace, "--standalone", str(script)], cwd=tmp_path,
                               kopf=reference_kopf if engine == "kopf" else None)
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if send(port, post_head(len(REVIEW)), REVIEW)[0] == 200:
                    break
            except OSError:
                pass  # not listening yet
            assert time.monotonic() < deadline, operator.output
            time.sleep(0.2)
        rss_before, _ = memory(operator.process.pid)

        # 16 oversized reviews at once, each declared and sent in full.
        body = b"x" * BIG
        with concurrent.futures.ThreadPoolExecutor(16) as pool:
            oversized = list(pool.map(lambda _: send(port, post_head(BIG), body), range(16)))
        codes = sorted({code for code, _ in oversized}, key=str)
        rss_after, peak = memory(operator.process.pid)

        chunk = b"x" * (1 << 20)
        chunked_body = b"".join(b"%x\r\n" % len(chunk) + chunk + b"\r\n" for _ in range(15)) + b"0\r\n\r\n"
        chunked, _ = send(port, post_head(None), chunked_body)
        deep = b"[" * 100_000 + b"]" * 100_000
        deeply, _ = send(port, post_head(len(deep)), deep)

        # A slow-loris of 100 connections that never finish their headers; valid reviews go on.
        lorises = []
        for _ in range(100):
            sock = socket.create_connection(("127.0.0.1", port))
            sock.sendall(b"POST /check HTTP/1.1\r\nHost: x\r\n")
            lorises.append(sock)
        latencies = sorted(send(port, post_head(len(REVIEW)), REVIEW)[1] for _ in range(20))
        for sock in lorises:
            sock.close()
        alive = operator.process.poll() is None
    finally:
        operator.stop()
    print(f"\n{engine}: 16 x 15 MiB -> {codes}, RSS {rss_before:.0f} -> {rss_after:.0f} MiB (peak {peak:.0f}); "
          f"chunked 15 MiB -> {chunked}; 100 000-deep -> {deeply}; "
          f"valid reviews under a slow-loris of 100: p95 {latencies[18] * 1000:.0f} ms; alive: {alive}")
    if engine == "ours":
        assert codes == [413] and chunked == 413 and deeply == 400, operator.output
        assert peak - rss_before < 64, "the oversized reviews were not held in memory"
        assert latencies[18] < 1.0 and alive
