#!/usr/bin/env python3
"""`spool chat` in a real pseudo-terminal (pexpect), against a real `spool serve` and its
scripted demo agent: a streamed answer, a question answered at the prompt, `/` listing the
commands, Ctrl-C stopping the running turn (not the program), the server killed and started
again mid-chat (the client reconnects and goes on), and `--json` for scripts.

    python tests/terminal/chat_pty.py [path/to/spool]      (default target/debug/spool)

Prints one line per check and exits 1 on the first failure."""

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pexpect

ROOT = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
SPOOL = os.path.abspath(sys.argv[1] if len(sys.argv) > 1 else os.path.join(ROOT, "target/debug/spool"))
TIMEOUT = 30


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(data_dir, port):
    """Starts `spool serve` on `port`; returns the process once it serves."""
    env = dict(os.environ, RUST_LOG="warn", SPOOL_RATE_LIMITS="off")
    log = open(os.path.join(data_dir, "serve.log"), "ab")
    process = subprocess.Popen(
        [SPOOL, "serve", "--addr", f"127.0.0.1:{port}", "--data-dir", data_dir],
        env=env,
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    for _ in range(300):
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return process
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"chat-pty: spool serve did not start on port {port}")


def check(what):
    print(f"chat-pty: {what}", flush=True)


def main():
    if not os.path.exists(SPOOL):
        raise SystemExit(f"chat-pty: no spool binary at {SPOOL}; build it with cargo build -p spool-local")
    data_dir = tempfile.mkdtemp(prefix="spool-chat-pty-")
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    server = serve(data_dir, port)
    chat = None
    try:
        env = dict(os.environ, TERM="dumb", NO_COLOR="1")
        chat = pexpect.spawn(
            SPOOL,
            ["chat", "--url", url, "--data-dir", data_dir, "--new"],
            env=env,
            encoding="utf-8",
            timeout=TIMEOUT,
        )
        chat.expect(r"Chat (\S+) in workspace")
        session = chat.match.group(1)
        chat.expect_exact("> ")

        chat.sendline("hello there")
        chat.expect_exact("You wrote: *hello there*")
        chat.expect_exact("\r\n> ")
        check("a message's answer streams in, then the prompt comes back")

        chat.sendline("ask me a question")
        chat.expect_exact("? What should I call you?")
        chat.expect_exact("answer> ")
        chat.sendline("Ada")
        chat.expect_exact("Nice to meet you, **Ada**")
        chat.expect_exact("\r\n> ")
        check("a question is answered at the prompt and the turn goes on")

        chat.sendline("/")
        chat.expect_exact("/help")
        chat.expect_exact("> ")
        check("`/` lists the chat's commands")

        chat.sendline("tell me about streams")
        chat.expect_exact("Every word you see")
        chat.sendintr()
        chat.expect_exact("(stopping the turn")
        chat.expect_exact("(the turn was aborted)")
        chat.expect_exact("> ")
        assert chat.isalive(), "Ctrl-C ended the program, not the turn"
        check("Ctrl-C stops the running turn and the program goes on")

        # The server dies (kill -9) and comes back on the same port and data: the client
        # reconnects its stream and the conversation goes on.
        server.send_signal(signal.SIGKILL)
        server.wait()
        chat.expect_exact("reconnecting")
        server = serve(data_dir, port)
        chat.sendline("hello again")
        chat.expect_exact("You wrote: *hello again*")
        chat.expect_exact("\r\n> ")
        check("after the server died and came back, the client reconnected and the chat went on")

        chat.sendline("/quit")
        chat.expect(pexpect.EOF)
        chat.close()
        assert chat.exitstatus == 0, f"/quit exited with {chat.exitstatus}"
        check("/quit ends it")

        # For scripts: one message, its events as JSON lines, the end at the turn's end.
        out = subprocess.run(
            [SPOOL, "chat", "--url", url, "--data-dir", data_dir, "--chat", session, "--json", "-m", "hello json"],
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
            check=True,
        ).stdout
        events = [json.loads(line) for line in out.splitlines() if line.strip()]
        types = [e["type"] for e in events]
        assert types[-1] == "agent_end", types
        assert "message_update" in types, types
        assert any(e["type"] == "message_end" and "hello json" in e["payload"]["text"] for e in events), types
        seqs = [e["seq"] for e in events]
        assert seqs == sorted(set(seqs)), f"events repeated or out of order: {seqs}"
        check(f"--json prints the turn's {len(events)} events once each, in order, and exits at its end")
        # Without --chat or --new, a person picks one of the workspace's chats (or a new one).
        picker = pexpect.spawn(SPOOL, ["chat", "--url", url, "--data-dir", data_dir], env=env, encoding="utf-8", timeout=TIMEOUT)
        picker.expect_exact("Chats:")
        picker.expect_exact("n) a new chat")
        picker.expect_exact("pick> ")
        picker.sendline("9")
        picker.expect_exact("type a number from 1 to")
        picker.sendline("1")
        picker.expect(r"Chat (\S+) in workspace")
        assert picker.match.group(1) == session, f"picked {picker.match.group(1)}, not {session}"
        picker.expect_exact("> ")
        picker.sendline("/quit")
        picker.expect(pexpect.EOF)
        check("without --chat, the person picks a chat (a wrong number asks again)")

        # Input that ends while the agent asks: a clear error, not a wait for ever.
        piped = subprocess.run(
            [SPOOL, "chat", "--url", url, "--data-dir", data_dir, "--chat", session],
            input="ask me a question\n",
            capture_output=True,
            text=True,
            timeout=TIMEOUT,
        )
        assert piped.returncode != 0, piped
        assert "answer it in `spool chat --chat" in piped.stderr, piped.stderr
        check("input that ends while the agent asks is a clear error, not a wait for ever")
    except (pexpect.TIMEOUT, pexpect.EOF, AssertionError) as e:
        before = chat.before if chat is not None else ""
        print(f"chat-pty: FAILED: {type(e).__name__}: {e}\n--- the terminal showed ---\n{before}", file=sys.stderr)
        sys.exit(1)
    finally:
        if chat is not None and chat.isalive():
            chat.terminate(force=True)
        server.terminate()
        server.wait()
        shutil.rmtree(data_dir, ignore_errors=True)
    print("chat-pty: passed")


if __name__ == "__main__":
    main()
