#!/usr/bin/env python3
"""`make bench`'s companion figures: `spool companion` over 10,000 generated notes (about 40 MB
of markdown, a tenth with an open `- [ ]` item): how long the index takes, and `/context-for-query`
p50/p99 over loopback with one keep-alive client (2,000 three-word questions, the first 100 not
counted). No Spool is needed: the companion answers questions from its index alone.

Usage: tests/bench/companion.py path/to/spool [notes]"""

import http.client
import os
import random
import re
import subprocess
import sys
import tempfile
import time


def generate(root, count):
    rng = random.Random(7)
    base = ("garden tomato water compost plumber invoice meeting project launch draft review budget travel "
            "flight hotel recipe bread yeast oven sprint release backlog design token stream chat agent "
            "notebook library kiwi mango river mountain train bicycle music piano ticket doctor school "
            "exam lecture paper research data model chart").split()
    words = [f"{w}{i}" if i else w for w in base for i in range(40)]
    for n in range(count):
        folder = os.path.join(root, f"folder{n % 50}")
        os.makedirs(folder, exist_ok=True)
        body = " ".join(rng.choice(words) for _ in range(rng.randint(80, 400)))
        todo = "\n- [ ] " + " ".join(rng.choice(words) for _ in range(5)) if n % 10 == 0 else ""
        with open(os.path.join(folder, f"note{n}.md"), "w") as f:
            f.write(f"# Note {n} {rng.choice(words)}\n\n{body}{todo}\n")
    return words


def main():
    spool = sys.argv[1]
    count = int(sys.argv[2]) if len(sys.argv) > 2 else 10_000
    with tempfile.TemporaryDirectory() as tmp:
        library = os.path.join(tmp, "notes")
        words = generate(library, count)
        env = dict(os.environ, SPOOL_API_KEY="spool_bench_unused", RUST_LOG="warn")
        args = [spool, "companion", "--library", library, "--spool-url", "http://127.0.0.1:9",
                "--addr", "127.0.0.1:0", "--salt-file", os.path.join(tmp, "salt")]
        child = subprocess.Popen(args, stderr=subprocess.PIPE, env=env, text=True)
        try:
            indexed, url = None, None
            for line in child.stderr:
                m = re.search(r"Indexed (\d+) notes in (\d+) ms", line)
                if m:
                    indexed = (int(m.group(1)), int(m.group(2)))
                m = re.search(r"Companion listening on http://(\S+)", line)
                if m:
                    url = m.group(1)
                    break
            if not url or not indexed:
                sys.exit("companion bench: the companion did not start")
            host, port = url.rsplit(":", 1)
            conn = http.client.HTTPConnection(host, int(port))
            rng = random.Random(3)
            latencies = []
            for _ in range(2000):
                q = "+".join(rng.sample(words, 3))
                start = time.perf_counter()
                conn.request("GET", f"/context-for-query?q={q}")
                response = conn.getresponse()
                response.read()
                latencies.append((time.perf_counter() - start) * 1000)
                if response.status != 200:
                    sys.exit(f"companion bench: /context-for-query answered {response.status}")
            latencies = sorted(latencies[100:])
            p50 = latencies[len(latencies) // 2]
            p99 = latencies[int(len(latencies) * 0.99)]
            print(f"companion: indexed {indexed[0]} notes in {indexed[1]} ms; "
                  f"/context-for-query p50 {p50:.2f} ms, p99 {p99:.2f} ms ({len(latencies)} queries)")
        finally:
            child.terminate()
            child.wait()


if __name__ == "__main__":
    main()
