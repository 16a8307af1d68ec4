#!/usr/bin/env python3
"""Records one run of the real runner as the server-sent events the playground receives.

Starts nothing: point it at a running `hopfuse serve` (on the GPU machine), e.g.

    hopfuse serve --addr 127.0.0.1:18080 &
    python3 scripts/record-run.py http://127.0.0.1:18080 examples/tma/exp_2d.hf M=8192,N=8192 out.sse
    python3 scripts/record-run.py ... out.sse --profile   # the run with "profile": true (ncu)

The raw event stream (every event of the job, ending with `done`) is written to the output file.
`web/tests/screenshot.mjs` replays it in the playground to make the screenshots in docs/ (the GPU
machine has no browser).
"""
import argparse
import json
import sys
import urllib.request


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("base")
    ap.add_argument("program")
    ap.add_argument("sizes", help="M=...,N=...")
    ap.add_argument("out")
    ap.add_argument("--profile", action="store_true", help="profile the kernel with Nsight Compute")
    args = ap.parse_args()
    size_map = {k: int(v) for k, v in (kv.split("=") for kv in args.sizes.split(","))}
    request = {"program": open(args.program).read(), "sizes": size_map, "file": args.program}
    if args.profile:
        request["profile"] = True
    req = urllib.request.Request(args.base + "/api/run", data=json.dumps(request).encode(), method="POST")
    with urllib.request.urlopen(req) as r:
        job = json.load(r)
    # A profile runs the program again under ncu: allow for it.
    with urllib.request.urlopen(args.base + job["events"], timeout=900) as r:
        stream = r.read().decode()
    with open(args.out, "w") as f:
        f.write(stream)
    done = [b for b in stream.split("\n\n") if b.startswith("event: done")]
    print(done[0][:400] if done else "no done event", file=sys.stderr)
    return 0 if done else 1


if __name__ == "__main__":
    sys.exit(main())
