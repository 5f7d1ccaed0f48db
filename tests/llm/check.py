#!/usr/bin/env python3
"""`make llm-check`: Spool's OpenAI-compatible runtime against a real model server.

Starts llama.cpp's llama-server with SmolLM2-135M on a free loopback port, then `spool serve`
pointed at it (SPOOL_OPENAI_BASE_URL), and drives chats through the HTTP API:

  1. a streamed answer: several message_update deltas, a non-empty text, a usage event with
     tokens both ways, and GET …/usage adding up to the same numbers;
  2. an abort mid-answer: agent_end `aborted` soon after POST …/control, no delta after it;
  3. compaction: an agent with a small context budget, until a history_compacted event whose
     summary the model wrote (`by` is the runtime, not `extract`); then `/compact`;
  4. a regenerate: POST …/regenerate answers the last message again; `?branch=all` holds both
     answers, the active branch only the new one (skipped, loudly, where the route is missing).

The model is tiny, so everything asserted is structure (events, counts, non-empty text), never
wording. Every wait is bounded; both servers listen on 127.0.0.1 only and are stopped on exit,
however it exits. Python 3.11 standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import traceback
import urllib.error
import urllib.request
from pathlib import Path

MODEL = "smollm2-135m"
INSTRUCTION = "You are a helpful assistant. Answer in plain text."
# The compaction step's agent's context budget: the least an agent may have.
CONTEXT_TOKENS = 256
# No proxy, whatever the environment says: everything here is on 127.0.0.1.
HTTP = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class Failed(Exception):
    """A step's assertion that did not hold, with what to do about it."""

    def __init__(self, message: str, hint: str = ""):
        super().__init__(message)
        self.hint = hint


class Skipped(Exception):
    """A step that cannot run against this build."""


def say(text: str) -> None:
    print(f"llm-check: {text}", flush=True)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def request(method: str, url: str, body=None, token: str | None = None, timeout: float = 30):
    """(status, parsed JSON or text) of one request; an HTTP error is an answer, not a raise."""
    data = None if body is None else json.dumps(body).encode()
    req = urllib.request.Request(url, data=data, method=method)
    if data is not None:
        req.add_header("content-type", "application/json")
    if token:
        req.add_header("authorization", f"Bearer {token}")
    try:
        with HTTP.open(req, timeout=timeout) as r:
            status, raw = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, raw = e.code, e.read()
    except OSError as e:  # refused, reset, timed out
        raise Failed(f"{method} {url} got no answer: {e}", "the server may have died or hung: see its log") from e
    text = raw.decode(errors="replace")
    try:
        return status, json.loads(text) if text else None
    except json.JSONDecodeError:
        return status, text


class Process:
    """A server this script started: its output in a log file, stopped by `stop`."""

    def __init__(self, name: str, argv: list[str], log: Path, started: list["Process"], env=None):
        self.name, self.log = name, log
        self.out = open(log, "wb")
        try:
            self.proc = subprocess.Popen(
                argv, stdout=self.out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                env=env, start_new_session=True,
            )
        except OSError as e:
            self.out.close()
            raise Failed(f"cannot start {name} ({argv[0]}): {e}", "run it through `make llm-check`, which builds it")
        started.append(self)  # stopped at exit from here on, whatever happens next

    def text(self) -> str:
        self.out.flush()
        return self.log.read_text(errors="replace")

    def tail(self, lines: int = 15) -> str:
        return "\n".join("    " + l for l in self.text().splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.proc.poll() is not None:
            raise Failed(f"{self.name} exited with {self.proc.returncode}:\n{self.tail()}",
                         f"see its log, {self.log}")

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=10)
        self.out.close()


def start_llama(binary: Path, model: Path, logs: Path, started: list[Process]) -> tuple[Process, str]:
    port = free_port()
    # One slot of 8192 tokens (SmolLM2's window), greedy sampling as the server's default (the
    # agent API has no temperature), answers cut at 512 tokens so no step waits on a ramble.
    # One thread: on two cores shared with anything else (a cargo build), ggml's two threads
    # spin-wait on each other and generation slows about fifty-fold (3 tokens a second, not 150).
    argv = [str(binary), "-m", str(model), "--host", "127.0.0.1", "--port", str(port),
            "-c", "8192", "-np", "1", "-t", "1", "-tb", "1", "-n", "512", "--temp", "0", "--seed", "1",
            "--alias", MODEL]
    server = Process("llama-server", argv, logs / "llama-server.log", started)
    base = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        server.check_alive()
        try:
            status, _ = request("GET", f"{base}/health", timeout=2)
            if status == 200:
                return server, base
        except Failed:  # not listening yet
            pass
        time.sleep(0.25)
    raise Failed(f"llama-server did not load the model in 120 s:\n{server.tail()}", f"see {server.log}")


def direct_completion(base: str) -> int:
    """One small completion straight to llama-server, so that a model server that cannot answer
    is told apart from Spool failing to ask it."""
    body = {"model": MODEL, "max_tokens": 8, "messages": [{"role": "user", "content": "Say hello."}]}
    status, answer = request("POST", f"{base}/v1/chat/completions", body, timeout=120)
    if status != 200 or not isinstance(answer, dict) or "choices" not in answer:
        raise Failed(f"llama-server's own chat completion answered {status}: {answer}",
                     "llama-server cannot answer with this model: see its log")
    return answer.get("usage", {}).get("completion_tokens", 0)


def start_spool(binary: Path, llama: str, logs: Path, started: list[Process]) -> tuple[Process, str, str]:
    if not binary.exists():
        raise Failed(f"no spool binary at {binary}", "build it with `cargo build -p spool-local`, or set SPOOL_BIN")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("SPOOL_OPENAI_", "SPOOL_ANTHROPIC_"))}
    env.update(
        RUST_LOG="warn", SPOOL_RATE_LIMITS="off", NO_PROXY="127.0.0.1,localhost", no_proxy="127.0.0.1,localhost",
        SPOOL_OPENAI_BASE_URL=f"{llama}/v1", SPOOL_OPENAI_API_KEY="none", SPOOL_OPENAI_MODEL=MODEL,
    )
    argv = [str(binary), "serve", "--addr", "127.0.0.1:0", "--data-dir", str(logs / "spool-data")]
    server = Process("spool serve", argv, logs / "spool.log", started, env)
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        server.check_alive()
        for line in server.text().splitlines():
            if "Open the web UI, signed in: " in line:
                link = line.split("signed in: ", 1)[1].strip()
                origin, _, fragment = link.partition("/#")
                key = dict(p.split("=", 1) for p in fragment.split("&") if "=" in p).get("key", "")
                status, body = request("POST", f"{origin}/v1/handshake", {"version": "1", "api_key": key})
                if status != 200:
                    raise Failed(f"the handshake answered {status}: {body}", f"see {server.log}")
                return server, origin, body["jwt"]
        time.sleep(0.25)
    raise Failed(f"spool serve did not start in 60 s:\n{server.tail()}", f"see {server.log}")


class Api:
    def __init__(self, origin: str, token: str):
        self.origin, self.token = origin, token

    def call(self, method: str, path: str, body=None, expect: tuple[int, ...] = (200, 201, 202)):
        status, answer = request(method, self.origin + path, body, self.token)
        if status not in expect:
            raise Failed(f"{method} {path} answered {status}: {answer}",
                         "the API refused a request this check makes: compare it with GET /v1/openapi.json")
        return answer

    def agent(self, workspace: str, name: str, **extra) -> str:
        body = {"name": name, "instruction": INSTRUCTION, "runtime": "openai", "model": MODEL, **extra}
        return self.call("POST", f"/v1/workspaces/{workspace}/agents", body)["id"]

    def chat(self, workspace: str, agent: str, title: str) -> "Chat":
        body = {"workspace_id": workspace, "agent_id": agent, "title": title}
        return Chat(self, self.call("POST", "/v1/sessions", body)["id"])


class Chat:
    """One chat's events, followed by polling `GET …/events?after=N`."""

    def __init__(self, api: Api, sid: str):
        self.api, self.id, self.events, self.after = api, sid, [], 0

    def poll(self) -> None:
        for _ in range(100):
            page = self.api.call("GET", f"/v1/sessions/{self.id}/events?after={self.after}&limit=1000")
            self.events.extend(page["events"])
            if page["events"]:
                self.after = page["events"][-1]["seq"]
            if page["up_to_date"] or not page["events"]:
                return

    def all(self, branch: str | None = None) -> list[dict]:
        """Every event of the chat, read again from the start (on `branch`, if given)."""
        out, after = [], 0
        for _ in range(100):
            query = f"after={after}&limit=1000" + (f"&branch={branch}" if branch else "")
            page = self.api.call("GET", f"/v1/sessions/{self.id}/events?{query}")
            out.extend(page["events"])
            if page["up_to_date"] or not page["events"]:
                return out
            after = page["events"][-1]["seq"]
        return out

    def of(self, turn: str, kind: str) -> list[dict]:
        return [e for e in self.events if e.get("turn_id") == turn and e["type"] == kind]

    def wait(self, what: str, found, timeout: float, servers: list[Process]):
        """Poll until `found(self)` is truthy; fail after `timeout` seconds."""
        deadline = time.monotonic() + timeout
        while True:
            self.poll()
            hit = found(self)
            if hit:
                return hit
            for server in servers:
                server.check_alive()
            if time.monotonic() > deadline:
                last = [e["type"] for e in self.events[-8:]]
                raise Failed(f"no {what} within {timeout:.0f} s (the chat's last events: {last})",
                             "see the servers' logs below; a slow machine may need a longer bound")
            time.sleep(0.1)

    def end_of(self, turn: str, timeout: float, servers: list[Process]) -> dict:
        return self.wait(f"agent_end of turn {turn}", lambda c: next(iter(c.of(turn, "agent_end")), None),
                         timeout, servers)

    def send(self, content: str) -> tuple[int, str]:
        answer = self.api.call("POST", f"/v1/sessions/{self.id}/messages", {"content": content})
        return answer["seq"], answer["turn_id"]


def completed(end: dict, chat: Chat) -> None:
    payload = end["payload"]
    if payload["reason"] != "complete":
        notes = [e["payload"] for e in chat.events if e["type"] == "system"][-3:]
        raise Failed(f"the turn ended `{payload['reason']}`: {payload.get('error')} (notes: {notes})",
                     "the OpenAI-compatible runtime failed against llama-server: see both logs")


def quote(text: str, width: int = 60) -> str:
    """The start of a text, on one line and quoted, for the output."""
    flat = " ".join(text.split())
    return json.dumps(flat if len(flat) <= width else flat[: width - 1] + "…", ensure_ascii=False)


def answer_text(chat: Chat, turn: str) -> str:
    return "".join(e["payload"]["text"] for e in chat.of(turn, "message_end"))


# ---------------------------------------------------------------------------------------------
# The steps. Each returns a one-line summary of what it saw, or raises Failed / Skipped.


def step_stream(api: Api, ws: str, agent: str, servers: list[Process]) -> str:
    chat = api.chat(ws, agent, "llm-check: stream")
    _, turn = chat.send("Write a long story about a sailor and the sea, in three paragraphs.")
    end = chat.end_of(turn, 120, servers)
    completed(end, chat)
    deltas = chat.of(turn, "message_update")
    if len(deltas) < 3:
        raise Failed(f"only {len(deltas)} message_update deltas: the answer did not stream",
                     "the runtime must send `stream: true` and forward each chunk's text")
    text = answer_text(chat, turn)
    if not text.strip():
        raise Failed("the answer's message_end text is empty", "see llama-server's log for what it generated")
    for end_event in chat.of(turn, "message_end"):
        mid = end_event["payload"]["message_id"]
        joined = "".join(d["payload"]["delta"] for d in deltas if d["payload"]["message_id"] == mid)
        if joined != end_event["payload"]["text"]:
            raise Failed(f"message {mid}: the deltas add up to {len(joined)} characters, its text has "
                         f"{len(end_event['payload']['text'])}", "deltas and message_end must tell one text")
    usages = [e["payload"] for e in chat.events if e["type"] == "usage"]
    mine = [e["payload"] for e in chat.of(turn, "usage")]
    if not mine or not all(u["input_tokens"] > 0 and u["output_tokens"] > 0 for u in mine):
        raise Failed(f"the turn's usage events are {mine}: tokens missing",
                     "the runtime must ask for stream_options.include_usage and read the last chunk's usage")
    want = (sum(u["input_tokens"] for u in usages), sum(u["output_tokens"] for u in usages))
    got = None
    for _ in range(50):  # the ledger is written right after the event: a moment at most
        report = api.call("GET", f"/v1/sessions/{chat.id}/usage")
        got = (report["input_tokens"], report["output_tokens"])
        if got == want:
            break
        time.sleep(0.1)
    if got != want:
        raise Failed(f"GET /usage says {got[0]} in / {got[1]} out; the usage events add up to {want[0]} / {want[1]}",
                     "the usage ledger must record each usage event once")
    return (f"{len(deltas)} deltas, {len(text)} characters ({quote(text)}), "
            f"usage {want[0]} in / {want[1]} out, GET /usage agrees")


def generating(llama: str) -> bool | None:
    """Whether llama-server is generating now (None: its /slots endpoint is off)."""
    status, slots = request("GET", f"{llama}/slots", timeout=5)
    if status != 200 or not isinstance(slots, list):
        return None
    return any(slot.get("is_processing") for slot in slots)


def step_abort(api: Api, ws: str, agent: str, llama: str, servers: list[Process]) -> str:
    chat = api.chat(ws, agent, "llm-check: abort")
    _, turn = chat.send("Count from 1 to 500, one number per line. Do not stop early.")
    chat.wait("first message_update", lambda c: c.of(turn, "message_update"), 120, servers)
    asked = time.monotonic()
    answer = api.call("POST", f"/v1/sessions/{chat.id}/control", {"action": "abort"})
    if answer.get("turn_id") not in (None, turn):
        raise Failed(f"the abort names turn {answer.get('turn_id')}, not {turn}", "")
    end = chat.end_of(turn, 15, servers)
    took = time.monotonic() - asked
    if end["payload"]["reason"] != "aborted":
        raise Failed(f"the turn ended `{end['payload']['reason']}` after the abort, not `aborted` "
                     f"({len(chat.of(turn, 'message_update'))} deltas)",
                     "the answer finished before the abort arrived, or the abort was not seen: see spool's log")
    if took > 5:
        raise Failed(f"agent_end came {took:.1f} s after the abort", "an abort must stop the model's stream at once")
    # The model's stream is dropped, so llama-server stops generating too (one slot: a
    # generation left running would hold every later request).
    stopped = None
    for _ in range(50):
        stopped = generating(llama)
        if not stopped:
            break
        time.sleep(0.1)
    if stopped:
        raise Failed("llama-server still generates 5 s after the turn was aborted",
                     "an abort must close the HTTP stream to the model server")
    server_note = "llama-server's /slots is off" if stopped is None else "llama-server idle"
    time.sleep(2)  # anything still streaming would be written by now
    chat.poll()
    late = [e for e in chat.of(turn, "message_update") if e["seq"] > end["seq"]]
    if late:
        raise Failed(f"{len(late)} message_update deltas after agent_end", "an aborted turn must write nothing more")
    deltas = len(chat.of(turn, "message_update"))
    ends = chat.of(turn, "message_end")
    marked = "the message marked aborted" if ends and ends[-1]["payload"].get("aborted") else "no aborted message_end"
    return (f"agent_end aborted {took:.2f} s after the abort, after {deltas} deltas; none after it; "
            f"{marked}; {server_note}")


def compaction_of(chat: Chat, reason: str, after_seq: int):
    hits = [e for e in chat.events if e["type"] == "history_compacted" and e["payload"]["reason"] == reason
            and e["seq"] > after_seq]
    return hits[-1] if hits else None


def written_by_model(event: dict) -> str:
    p = event["payload"]
    if p["by"] == "extract" or not p["by"].startswith("openai:"):
        raise Failed(f"the summary ({p['reason']}) is by `{p['by']}`, not the model",
                     "a runtime that summarizes() must ask the model; `extract` means it fell back")
    if not p["summary"].strip():
        raise Failed("the model's summary is empty", "an empty summary must not stand for the history")
    return f"by {p['by']}, events {p['from_seq']}..{p['through_seq']} in {len(p['summary'])} characters ({quote(p['summary'], 40)})"


def step_compact(api: Api, ws: str, servers: list[Process]) -> str:
    # The smallest budget an agent may have, which the agent's tool definitions alone outgrow:
    # from the second exchange on there is history before the turn to summarise. Short answers
    # keep each summary quick.
    agent = api.agent(ws, "llm-check compactor", context_tokens=CONTEXT_TOKENS)
    chat = api.chat(ws, agent, "llm-check: compaction")
    prompts = [f"In one sentence, what is {thing}?" for thing in
               ("a lighthouse", "a forest", "a desert", "a harbour", "a mountain", "a river")]
    budget = None
    for n, prompt in enumerate(prompts, 1):
        t = time.monotonic()
        _, turn = chat.send(prompt)
        completed(chat.end_of(turn, 180, servers), chat)
        budget = compaction_of(chat, "budget", 0)
        say(f"    exchange {n}: {time.monotonic() - t:.1f} s" + (", history compacted" if budget else ""))
        if budget:
            break
    if not budget:
        raise Failed(f"no history_compacted after {len(prompts)} exchanges with context_tokens {CONTEXT_TOKENS}",
                     "a history past the agent's budget must be summarised before the model is asked")
    first = f"budget compaction at exchange {n}: {written_by_model(budget)}"
    t = time.monotonic()
    invoked = api.call("POST", f"/v1/sessions/{chat.id}/slash-commands/invoke", {"input": "/compact"})
    mark = invoked["seq"]
    turn = invoked.get("turn_id")
    command = chat.wait("history_compacted for /compact", lambda c: compaction_of(c, "command", mark), 180, servers)
    if turn:
        completed(chat.end_of(turn, 60, servers), chat)
    say(f"    /compact: {time.monotonic() - t:.1f} s")
    return f"{first}; /compact: {written_by_model(command)}"


def step_regenerate(api: Api, ws: str, agent: str, servers: list[Process]) -> str:
    chat = api.chat(ws, agent, "llm-check: regenerate")
    first_seq, first = chat.send("Name three colours.")
    completed(chat.end_of(first, 120, servers), chat)
    if not answer_text(chat, first).strip():
        raise Failed("the first answer is empty", "see llama-server's log")
    status, answer = request("POST", f"{api.origin}/v1/sessions/{chat.id}/regenerate", {}, api.token)
    if status == 404 and isinstance(answer, dict) and answer.get("error", {}).get("code") == "no_route":
        raise Skipped("regenerate route missing (404)")
    if status != 202 or not isinstance(answer, dict) or not {"seq", "turn_id", "duplicate"} <= answer.keys():
        raise Failed(f"POST /regenerate answered {status}: {answer}", "it must answer 202 {seq, turn_id, duplicate}")
    if answer["duplicate"]:
        raise Failed("the regenerate says it is a duplicate", "a regenerate without client_message_id is new")
    turn = answer["turn_id"]
    completed(chat.end_of(turn, 120, servers), chat)
    if not answer_text(chat, turn).strip():
        raise Failed("the regenerated answer is empty", "see llama-server's log")
    message = next((e for e in chat.events if e["seq"] == answer["seq"]), None)
    revision = (message or {}).get("payload", {}).get("revision") or {}
    if (message or {}).get("type") != "user_message_submitted" or revision.get("of") != first_seq \
            or revision.get("kind") != "regenerate":
        raise Failed(f"the event at seq {answer['seq']} is {message}",
                     f"it must be a user_message_submitted with revision {{of: {first_seq}, kind: regenerate}}")
    turns_with_answers = lambda events: {e.get("turn_id") for e in events if e["type"] == "message_end"}
    every = turns_with_answers(chat.all("all"))
    active = turns_with_answers(chat.all())
    if not {first, turn} <= every:
        raise Failed(f"?branch=all holds the answers of turns {sorted(every)}, not both {first} and {turn}",
                     "every event stays in the chat; branch=all shows them all")
    if turn not in active or first in active:
        raise Failed(f"the active branch holds the answers of turns {sorted(active)}: want {turn} only",
                     "the regenerate's branch must replace the earlier answer on the active branch")
    return f"a new answer ({len(answer_text(chat, turn))} characters); branch=all holds both, active only the new"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--llama-server", type=Path, required=True)
    parser.add_argument("--model", type=Path, required=True)
    parser.add_argument("--spool", type=Path, default=Path(os.environ.get("SPOOL_BIN", "target/debug/spool")))
    parser.add_argument("--steps", default="1,2,3,4", help="which steps to run (default: 1,2,3,4)")
    parser.add_argument("--keep-logs", action="store_true", help="keep the servers' logs even when every step passes")
    args = parser.parse_args()
    chosen = {int(n) for n in args.steps.split(",") if n.strip()}
    # Ctrl-C (even where a shell started this in the background), SIGTERM and SIGHUP unwind
    # through the `finally` below, so the servers are stopped.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    for sig in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, lambda number, _frame: sys.exit(128 + number))

    logs = Path(tempfile.mkdtemp(prefix="spool-llm-check-"))
    servers: list[Process] = []
    results: list[tuple[str, str, str]] = []
    started = time.monotonic()
    try:
        try:
            t = time.monotonic()
            say(f"starting llama-server ({args.model.name}) on a free loopback port…")
            _, base = start_llama(args.llama_server.resolve(), args.model.resolve(), logs, servers)
            say(f"  llama-server ready at {base} ({time.monotonic() - t:.1f} s)")
            t = time.monotonic()
            tokens = direct_completion(base)
            say(f"  a completion straight from it: {tokens} tokens ({time.monotonic() - t:.1f} s)")
            t = time.monotonic()
            say(f"starting spool serve ({args.spool}) with SPOOL_OPENAI_BASE_URL={base}/v1…")
            _, origin, token = start_spool(args.spool.resolve(), base, logs, servers)
            say(f"  spool serve ready at {origin} ({time.monotonic() - t:.1f} s)")
            api = Api(origin, token)
            ws = api.call("POST", "/v1/workspaces", {"name": "llm-check"})["id"]
            agent = api.agent(ws, "llm-check")
        except Failed as e:
            say(f"FAILED to start: {e}")
            if e.hint:
                say(f"  what to do: {e.hint}")
            say(f"the servers' logs are kept in {logs}")
            return 1
        steps = [
            ("1/4 a streamed answer with usage", lambda: step_stream(api, ws, agent, servers)),
            ("2/4 an abort mid-answer", lambda: step_abort(api, ws, agent, base, servers)),
            ("3/4 a compaction the model wrote", lambda: step_compact(api, ws, servers)),
            ("4/4 a regenerate", lambda: step_regenerate(api, ws, agent, servers)),
        ]
        for number, (name, run) in enumerate(steps, 1):
            if number not in chosen:
                continue
            say(f"step {name}…")
            t = time.monotonic()
            try:
                detail = run()
                results.append(("passed", name, detail))
                say(f"  ok ({time.monotonic() - t:.1f} s): {detail}")
            except Skipped as e:
                results.append(("skipped", name, str(e)))
                say(f"  SKIPPED: {e}")
            except Exception as e:  # Failed, or an answer of another shape than this check reads
                if not isinstance(e, Failed):
                    traceback.print_exc()
                    e = Failed(f"{type(e).__name__}: {e}", "an answer had another shape than this check "
                               "expects: compare it with GET /v1/openapi.json and update tests/llm/check.py")
                results.append(("failed", name, str(e)))
                say(f"  FAILED ({time.monotonic() - t:.1f} s): {e}")
                if e.hint:
                    say(f"  what to do: {e.hint}")
                for server in servers:
                    say(f"  the last lines of {server.name}'s log ({server.log}):\n{server.tail()}")
    finally:
        for server in reversed(servers):
            server.stop()
    count = {k: sum(1 for r in results if r[0] == k) for k in ("passed", "failed", "skipped")}
    say(f"done in {time.monotonic() - started:.0f} s")
    line = f"{count['passed']} passed, {count['failed']} failed"
    print(line + (f", {count['skipped']} skipped" if count["skipped"] else ""), flush=True)
    if count["failed"] or args.keep_logs:
        say(f"the servers' logs are kept in {logs}")
    if count["failed"]:
        return 1
    if not args.keep_logs:
        shutil.rmtree(logs, ignore_errors=True)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except KeyboardInterrupt:
        say("interrupted; the servers it started are stopped")
        sys.exit(130)
