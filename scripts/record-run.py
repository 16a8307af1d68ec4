#!/usr/bin/env python3
"""Records one run of the real runner as the server-sent events the playground receives.

Starts nothing: point it at a running `hopfuse serve` (on the GPU machine), e.g.

    hopfuse serve --addr 127.0.0.1:18080 &
    python3 scripts/record-run.py http://127.0.0.1:18080 examples/tma/exp_2d.hf M=8192,N=8192 out.sse

The raw event stream (every event of the job, ending with `done`) is written to the output file.
`web/tests/screenshot.mjs` replays it in the playground to make the screenshot in docs/ (the GPU
machine has no browser).
"""
import json
import sys
import urllib.request


def main() -> int:
    if len(sys.argv) != 5:
        print(__doc__, file=sys.stderr)
        return 2
    base, program, sizes, out = sys.argv[1:]
    size_map = {k: int(v) for k, v in (kv.split("=") for kv in sizes.split(","))}
    body = json.dumps(
        {"program": open(program).read(), "sizes": size_map, "file": program}
    ).encode()
    req = urllib.request.Request(base + "/api/run", data=body, method="POST")
    with urllib.request.urlopen(req) as r:
        job = json.load(r)
    with urllib.request.urlopen(base + job["events"], timeout=120) as r:
        stream = r.read().decode()
    with open(out, "w") as f:
        f.write(stream)
    done = [b for b in stream.split("\n\n") if b.startswith("event: done")]
    print(done[0][:400] if done else "no done event", file=sys.stderr)
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
