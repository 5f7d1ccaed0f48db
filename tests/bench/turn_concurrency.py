#!/usr/bin/env python3
"""How many turns one organization may run at once under `spool serve` on this machine.

Starts the `spool` binary (SPOOL_BIN, default target/debug/spool) on a fresh embedded store for
each bound in BOUNDS, with a second organization beside the local one. Organization A floods
FLOOD chats with one message each; half a second later organization B sends one message in each
of OTHER chats. Every agent runs a script shaped like a model turn: a pause (the provider's
time to first token), then words streamed one by one. Mostly waiting, as real turns are.

Prints, per bound: A's turns per second, B's wait from its message to its turn's
`agent_start` (median and worst), and the CPU the server used (of the machine's cores).
Not a test: numbers, for choosing `SPOOL_ORG_TURN_CONCURRENCY`'s default.

    python3 tests/bench/turn_concurrency.py            # bounds 4 8 16 32
    BOUNDS="16" FLOOD=64 python3 tests/bench/turn_concurrency.py
    WORDS=150 WORD_MS=10 python3 tests/bench/turn_concurrency.py   # denser streaming
    WORKER=16 BOUNDS=16 python3 tests/bench/turn_concurrency.py    # one organization can fill the worker
"""

import datetime
import json
import os
import re
import socket
import statistics
import subprocess
import tempfile
import threading
import time
import urllib.request

BIN = os.environ.get("SPOOL_BIN", "target/debug/spool")
BOUNDS = [int(b) for b in os.environ.get("BOUNDS", "4 8 16 32").split()]
WORKER = int(os.environ.get("WORKER", "0"))  # 0: twice the bound (at least 16)
FLOOD = int(os.environ.get("FLOOD", "48"))
OTHER = int(os.environ.get("OTHER", "4"))
WORDS = int(os.environ.get("WORDS", "40"))
SCRIPT = {
    "word_delay_ms": int(os.environ.get("WORD_MS", "40")),
    "default": [{"sleep_ms": 1500, "say": " ".join(["word"] * WORDS)}],
}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def call(base, method, path, token=None, body=None):
    data = json.dumps(body).encode() if body is not None else None
    request = urllib.request.Request(base + path, data=data, method=method)
    request.add_header("content-type", "application/json")
    if token:
        request.add_header("authorization", f"Bearer {token}")
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read() or b"null")


def ts(s):
    return datetime.datetime.fromisoformat(s.replace("Z", "+00:00")).timestamp()


def chats(base, token, n):
    ws = call(base, "POST", "/v1/workspaces", token, {"title": "Bench"})["id"]
    agent = call(base, "GET", f"/v1/workspaces/{ws}/agents", token)["agents"][0]["id"]
    call(base, "PATCH", f"/v1/agents/{agent}", token, {"instruction": json.dumps(SCRIPT), "runtime": "scripted"})
    return [call(base, "POST", "/v1/sessions", token, {"workspace_id": ws})["id"] for _ in range(n)]


def send_all(base, token, ids):
    threads = [
        threading.Thread(target=call, args=(base, "POST", f"/v1/sessions/{c}/messages", token, {"content": "go"}))
        for c in ids
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def turn_times(base, token, chat):
    """(message ts, agent_start ts, agent_end ts) of the chat's one turn, once it ended."""
    while True:
        events = call(base, "GET", f"/v1/sessions/{chat}/events?after=0&limit=1000", token)["events"]
        by = {e["type"]: ts(e["ts"]) for e in events}
        if "agent_end" in by:
            return by["user_message_submitted"], by["agent_start"], by["agent_end"]
        time.sleep(0.5)


def cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def run(bound):
    data = tempfile.mkdtemp(prefix="spool-bench-")
    env = dict(os.environ, SPOOL_DATA_DIR=data, SPOOL_RATE_LIMITS="off")
    org_b = json.loads(subprocess.check_output([BIN, "admin", "create-org", "Other", "--id", "other"], env=env))
    key_b = json.loads(subprocess.check_output([BIN, "admin", "create-api-key", org_b["org_id"]], env=env))["api_key"]
    port = free_port()
    env.update(
        SPOOL_ADDR=f"127.0.0.1:{port}",
        SPOOL_ORG_TURN_CONCURRENCY=str(bound),
        SPOOL_WORKER_CONCURRENCY=str(WORKER or max(16, 2 * bound)),
    )
    server = subprocess.Popen([BIN, "serve"], env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    try:
        key_a = None
        for line in server.stdout:
            m = re.search(r"(spool_[A-Za-z0-9_\-]+)", line)
            if m and key_a is None:
                key_a = m.group(1)
            if key_a and "http://" in line:
                break
        threading.Thread(target=server.stdout.read, daemon=True).start()
        base = f"http://127.0.0.1:{port}"
        token_a = call(base, "POST", "/v1/handshake", body={"api_key": key_a})["jwt"]
        token_b = call(base, "POST", "/v1/handshake", body={"api_key": key_b})["jwt"]
        flood, other = chats(base, token_a, FLOOD), chats(base, token_b, OTHER)
        cpu0, t0 = cpu_seconds(server.pid), time.time()
        sender = threading.Thread(target=send_all, args=(base, token_a, flood))
        sender.start()
        time.sleep(0.5)
        send_all(base, token_b, other)
        sender.join()
        a = [turn_times(base, token_a, c) for c in flood]
        b = [turn_times(base, token_b, c) for c in other]
        elapsed = max(end for _, _, end in a + b) - t0
        cpu = cpu_seconds(server.pid) - cpu0
        waits_b = sorted(start - sent for sent, start, _ in b)
        turn_s = statistics.median(end - start for _, start, end in a)
        print(
            f"bound {bound:3} (worker {env['SPOOL_WORKER_CONCURRENCY']}): A {FLOOD} turns in {elapsed:5.1f} s "
            f"({FLOOD / elapsed:4.1f}/s, a turn {turn_s:.2f} s); B waits p50 {statistics.median(waits_b):5.2f} s, "
            f"worst {waits_b[-1]:5.2f} s; server CPU {cpu / elapsed:4.2f} cores",
            flush=True,
        )
    finally:
        server.terminate()
        server.wait()


if __name__ == "__main__":
    for bound in BOUNDS:
        run(bound)
