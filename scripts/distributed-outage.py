#!/usr/bin/env python3
"""The distributed mode through outages (issue 39): bursts of jobs through failures.

Starts, on loopback, a PostgreSQL cluster of its own (scripts/setup-distributed.sh on port
25432, stopped at the end), a nats-server with JetStream on file storage, a front-end
(`hopfuse serve --queue`) and two agents (`hopfuse agent --fake-worker`, four slots each). Then
for each scenario it submits a burst of jobs (300 by default, 32 at a time) and, once a third of
them are accepted, causes the failure:

  agent-kill      an agent SIGKILLed, started again at once (its jobs are delivered again)
  nats-sigkill    nats-server SIGKILLed, started again on its store 0.3 s later
  nats-sigterm    nats-server stopped with SIGTERM, started again once it has exited
  postgres-down   the PostgreSQL cluster stopped for --pg-down seconds (90; --quick: 10)
  frontend-kill   the front-end SIGKILLed, started again at once on its port

After each burst it waits until every accepted job has ended and the runs waiting for the
database are written, and counts, per scenario:

  accepted    answered 202 (a job id)
  refused     answered otherwise, or still 503 (NATS down) or no answer at all (the front-end
              dead) after 30 s of tries every 0.5 s: the client knows the job was not taken
  retries     submissions tried again (503 or no answer), as a client does
  ended       accepted jobs whose GET /api/jobs/{id} says done
  not_fake    ended jobs whose result is not the fake worker's (crashed, error)
  lost        accepted jobs the front-end no longer knows (404)
  stuck       accepted jobs not ended within the wait
  duplicated  accepted jobs an agent ran to the end more than once (the agents' `job ended`
              log lines)
  stored      accepted jobs in the run history (PostgreSQL's `runs` table; the runs of a
              killed front-end's jobs are stored by its restart after 35 s, waited for)
  backlog     the most runs waiting for the database at once (GET /api/health: run_backlog),
              the oldest's age then, and the runs dropped

It prints the table (Markdown) and exits 1 when a job was lost or stuck, or an ended job was not
stored; 2 when it could not set up. The processes it started are stopped at the end; their logs
stay in the work directory (printed).

  python3 scripts/distributed-outage.py            # the full run (PostgreSQL down 90 s)
  python3 scripts/distributed-outage.py --quick    # about a minute and a half, for CI

Needs a built `hopfuse` (cargo build -p hopfuse-runner), nats-server and PostgreSQL's server
binaries (setup-distributed.sh installs them).
"""

import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Below the ephemeral ports (32768 and up on Linux): while the cluster is down, an outgoing
# connection could take its port and keep it from starting again.
PG_PORT = 25432
DATABASE = "hopfuse_outage"
AGENTS = ("a1", "a2")
# Seconds a submission answered 503 or not at all is tried again.
RETRY_FOR = 30
SCENARIOS = ("agent-kill", "nats-sigkill", "nats-sigterm", "postgres-down", "frontend-kill")


class SetupError(Exception):
    pass


def log(message):
    print(f"outage: {message}", file=sys.stderr, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def http(method, url, body=None, timeout=30):
    """(status, parsed JSON or None); status 0 when there was no answer."""
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(url, data=data, method=method)
    try:
        with urllib.request.urlopen(request, timeout=timeout) as r:
            status, text = r.status, r.read()
    except urllib.error.HTTPError as e:
        status, text = e.code, e.read()
    except (OSError, urllib.error.URLError):
        return 0, None
    try:
        return status, json.loads(text)
    except ValueError:
        return status, None


class Process:
    """A child process started with its output appended to a log file."""

    def __init__(self, args, log_path, ready_prefix=None, ready_timeout=60):
        self.args, self.log_path = args, log_path
        self.ready = None
        self.proc = None
        self.start(ready_prefix, ready_timeout)

    def start(self, ready_prefix=None, ready_timeout=60):
        log_file = open(self.log_path, "ab")
        env = dict(os.environ, RUST_LOG="hopfuse_runner=info")
        for name in ("HOPFUSE_TOKEN", "HOPFUSE_DB", "HOPFUSE_QUEUE", "HOPFUSE_NATS_TOKEN"):
            env.pop(name, None)
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE if ready_prefix else subprocess.DEVNULL,
            stderr=log_file,
            env=env,
        )
        log_file.close()
        if ready_prefix is None:
            return
        # The line that says it is ready, read on a thread so a silent child cannot hang us.
        found = threading.Event()

        def read():
            for raw in self.proc.stdout:
                line = raw.decode(errors="replace").strip()
                if not found.is_set() and line.startswith(ready_prefix):
                    self.ready = line[len(ready_prefix):].strip()
                    found.set()
            found.set()

        threading.Thread(target=read, daemon=True).start()
        if not found.wait(ready_timeout) or self.ready is None:
            self.kill()
            raise SetupError(f"{self.args[0]} {self.args[1]} did not start; see {self.log_path}")

    def kill(self):
        if self.proc and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()

    def terminate(self, wait=15):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(wait)
            except subprocess.TimeoutExpired:
                log(f"{self.args[0]} did not stop on SIGTERM within {wait} s: killed")
                self.kill()


class Postgres:
    """The cluster of scripts/setup-distributed.sh on PG_PORT, with a fresh DATABASE."""

    def __init__(self):
        self.start()
        versions = [p for p in Path("/usr/lib/postgresql").glob("*/bin") if p.parent.name.isdigit()]
        if not versions:
            raise SetupError("no PostgreSQL binaries under /usr/lib/postgresql")
        self.psql = str(max(versions, key=lambda p: int(p.parent.name)) / "psql")
        for sql in (f"DROP DATABASE IF EXISTS {DATABASE} WITH (FORCE)", f"CREATE DATABASE {DATABASE}"):
            self.query("postgres", sql)
        self.url = f"postgres://hopfuse@127.0.0.1:{PG_PORT}/{DATABASE}"

    def query(self, database, sql):
        """Its rows, one a line."""
        done = subprocess.run(
            [self.psql, "-h", "127.0.0.1", "-p", str(PG_PORT), "-U", "hopfuse", "-d", database,
             "-qtAc", sql], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SetupError(f"psql: {done.stderr.strip()}")
        return done.stdout

    def setup(self, *command):
        env = dict(os.environ, HOPFUSE_TEST_PG_PORT=str(PG_PORT))
        done = subprocess.run(["bash", str(ROOT / "scripts/setup-distributed.sh"), *command],
                              env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        if done.returncode != 0:
            raise SetupError(f"setup-distributed.sh {' '.join(command)}: {done.stderr.strip()}")

    def start(self):
        # A port just freed may still be taken for a moment: try a few times.
        for attempt in range(5):
            try:
                return self.setup()
            except SetupError:
                if attempt == 4:
                    raise
                time.sleep(2)

    def stop(self):
        self.setup("stop")

    def stored(self, ids):
        """How many of `ids` are in the run history."""
        return len(set(self.query(DATABASE, "SELECT id FROM runs").split()) & set(ids))


class Cluster:
    def __init__(self, hopfuse, work):
        self.hopfuse, self.work = hopfuse, work
        self.nats_exe = shutil.which("nats-server") or "/usr/sbin/nats-server"
        if not os.access(self.nats_exe, os.X_OK):
            raise SetupError("no nats-server: run scripts/setup-distributed.sh")
        self.pg = Postgres()
        self.nats_port = free_port()
        self.nats = None
        self.start_nats()
        self.nats_url = f"nats://127.0.0.1:{self.nats_port}"
        # One port for the front-end and its restart, as a service manager would.
        self.front_port = free_port()
        self.front = Process(self.front_args(), work / "frontend.log", "hopfuse serve: listening on ")
        self.agents = {name: self.start_agent(name) for name in AGENTS}
        self.wait_for_agents(len(AGENTS))

    def base(self):
        return self.front.ready

    def start_nats(self):
        self.nats = Process([self.nats_exe, "-js", "-a", "127.0.0.1", "-p", str(self.nats_port),
                             "-sd", str(self.work / "nats")], self.work / "nats.log")
        until = time.time() + 20
        while True:
            try:
                socket.create_connection(("127.0.0.1", self.nats_port), 1).close()
                return
            except OSError:
                if time.time() > until:
                    raise SetupError("nats-server did not start; see nats.log")
                time.sleep(0.05)

    def front_args(self):
        return [str(self.hopfuse), "serve", "--addr", f"127.0.0.1:{self.front_port}",
                "--static-dir", str(self.work / "no-dist"), "--data-dir", str(self.work / "frontend"),
                "--db", self.pg.url, "--queue", self.nats_url, "--queue-cap", "2000",
                "--runs-per-minute", "0", "--requests-per-minute", "0", "--client-queue-cap", "0"]

    def start_agent(self, name):
        # A 2 s job limit: a killed agent's jobs are delivered again after 9 s (the ack wait).
        return Process([str(self.hopfuse), "agent", "--queue", self.nats_url, "--name", name,
                        "--fake-worker", "--fake-behaviour", "from-program", "--job-timeout", "2",
                        "--gpus", "4", "--no-cubin-cache", "--data-dir", str(self.work / name)],
                       self.work / f"{name}.log", "hopfuse agent: ")

    def health(self):
        status, h = http("GET", f"{self.base()}/api/health", timeout=10)
        return h if status == 200 else None

    def wait_for_agents(self, count, wait=30):
        until = time.time() + wait
        while time.time() < until:
            h = self.health()
            if h and len((h.get("distributed") or {}).get("agents") or []) >= count:
                return
            time.sleep(0.2)
        raise SetupError(f"fewer than {count} agents in the front-end's health")

    def jobs_ended_by_agents(self):
        """job id -> how many runs of it ended, over every agent's log."""
        counts = {}
        for name in AGENTS:
            text = (self.work / f"{name}.log").read_text(errors="replace")
            for job in re.findall(r"job ended job=(\w+)", text):
                counts[job] = counts.get(job, 0) + 1
        return counts

    def stop(self):
        for p in [self.front, *self.agents.values(), self.nats]:
            if p:
                p.kill()
        try:
            self.pg.stop()
        except SetupError as e:
            log(str(e))


def fault(cluster, scenario, pg_down):
    """Causes `scenario`'s failure and repairs it; returns a note."""
    if scenario == "agent-kill":
        cluster.agents["a1"].kill()
        cluster.agents["a1"] = cluster.start_agent("a1")
        return "a1 SIGKILL, restarted"
    if scenario == "nats-sigkill":
        cluster.nats.kill()
        time.sleep(0.3)
        cluster.start_nats()
        return "nats-server SIGKILL, restarted 0.3 s later"
    if scenario == "nats-sigterm":
        cluster.nats.terminate()
        cluster.start_nats()
        return "nats-server SIGTERM, restarted after its exit"
    if scenario == "postgres-down":
        started = time.time()
        cluster.pg.stop()
        time.sleep(max(0.0, pg_down - (time.time() - started)))
        cluster.pg.start()
        return f"PostgreSQL stopped {pg_down:g} s"
    if scenario == "frontend-kill":
        cluster.front.kill()
        cluster.front.start("hopfuse serve: listening on ")
        return "front-end SIGKILL, restarted"
    raise ValueError(scenario)


def burst(cluster, scenario, jobs, pg_down, wait_s):
    """One scenario: its row of the table."""
    started = time.time()
    accepted, refused, retries = [], 0, [0]
    lock = threading.Lock()
    third = threading.Event()
    backlog = {"waiting": 0, "oldest_age_s": 0.0, "dropped": 0}
    sampling = threading.Event()

    def sample():
        while not sampling.is_set():
            h = cluster.health()
            b = (h or {}).get("run_backlog") or {}
            with lock:
                if b.get("waiting", 0) > backlog["waiting"]:
                    backlog["waiting"] = b["waiting"]
                backlog["oldest_age_s"] = max(backlog["oldest_age_s"], b.get("oldest_age_s") or 0.0)
                backlog["dropped"] = max(backlog["dropped"], b.get("dropped", 0))
            time.sleep(0.5)

    def submit(i):
        nonlocal refused
        program = (ROOT / "examples/basics/add.hf").read_text()
        body = {"program": f"// {scenario} job {i}\n// fake-delay-ms: 20\n{program}",
                "sizes": {"M": 256, "N": 256}, "iters": 5}
        # As a client would: no answer (the front-end is down) or 503 (NATS is) is tried again
        # every half second for up to RETRY_FOR seconds.
        given_up = time.time() + RETRY_FOR
        while True:
            status, v = http("POST", f"{cluster.base()}/api/run", body)
            if status not in (0, 503) or time.time() > given_up:
                break
            with lock:
                retries[0] += 1
            time.sleep(0.5)
        with lock:
            if status == 202:
                accepted.append(v["job_id"])
                if len(accepted) >= jobs // 3:
                    third.set()
            else:
                refused += 1

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    note = {}
    def cause():
        if third.wait(120):
            try:
                note["note"] = fault(cluster, scenario, pg_down)
            except SetupError as e:
                note["error"] = str(e)

    faulting = threading.Thread(target=cause)
    faulting.start()
    with ThreadPoolExecutor(32) as pool:
        list(pool.map(submit, range(jobs)))
    third.set()
    faulting.join()
    if "error" in note:
        raise SetupError(f"{scenario}: {note['error']}")
    if scenario == "agent-kill":
        cluster.wait_for_agents(len(AGENTS))

    # Every accepted job ends, or the wait runs out.
    pending = set(accepted)
    results, lost = {}, set()
    until = time.time() + wait_s
    while pending and time.time() < until:
        for job in sorted(pending):
            status, v = http("GET", f"{cluster.base()}/api/jobs/{job}", timeout=10)
            if status == 200 and v.get("done"):
                results[job] = v.get("status")
                pending.discard(job)
        if pending:
            time.sleep(1)
    for job in pending:
        status, _ = http("GET", f"{cluster.base()}/api/jobs/{job}", timeout=10)
        if status == 404:
            lost.add(job)
    # The runs that waited for the database are written.
    until = time.time() + 60
    while time.time() < until:
        h = cluster.health()
        if h and h["run_backlog"]["waiting"] == 0:
            break
        time.sleep(0.5)
    sampling.set()
    sampler.join()
    # The runs of jobs whose front-end died are stored by the next one after a delay
    # (ADOPT_AFTER in runner/src/distributed/frontend.rs: 35 s).
    until = time.time() + 60
    while (stored := cluster.pg.stored(accepted)) < len(results) and time.time() < until:
        time.sleep(1)
    ends = cluster.jobs_ended_by_agents()
    return {
        "scenario": scenario,
        "fault": note.get("note", "(not caused: a third of the jobs were never accepted)"),
        "submitted": jobs,
        "accepted": len(accepted),
        "refused": refused,
        "retries": retries[0],
        "ended": len(results),
        "not_fake": sum(1 for s in results.values() if s != "fake"),
        "lost": len(lost),
        "stuck": len(pending) - len(lost),
        "duplicated": sum(1 for job in accepted if ends.get(job, 0) > 1),
        "stored": stored,
        "backlog_peak": backlog["waiting"],
        "backlog_oldest_s": round(backlog["oldest_age_s"], 1),
        "backlog_dropped": backlog["dropped"],
        "seconds": round(time.time() - started, 1),
    }


COLUMNS = ("scenario", "accepted", "refused", "retries", "ended", "not_fake", "lost", "stuck", "duplicated",
           "stored", "backlog_peak", "backlog_oldest_s", "backlog_dropped", "seconds")


def table(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    lines += ["| " + " | ".join(str(r[c]) for c in COLUMNS) + " |" for r in rows]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true",
                        help="PostgreSQL down 10 s instead of 90 (unless --pg-down is given)")
    parser.add_argument("--pg-down", type=float, help="seconds PostgreSQL stays stopped")
    parser.add_argument("--jobs", type=int, default=300, help="jobs per burst (300)")
    parser.add_argument("--scenarios", default=",".join(SCENARIOS),
                        help=f"comma-separated, in order (default: all: {','.join(SCENARIOS)})")
    parser.add_argument("--hopfuse", type=Path,
                        help="the binary [default: target/release/hopfuse, else target/debug/hopfuse]")
    parser.add_argument("--work-dir", type=Path, help="logs and data [default: a new temporary one]")
    parser.add_argument("--json", type=Path, help="also write the rows here as JSON")
    args = parser.parse_args()
    pg_down = args.pg_down if args.pg_down is not None else (10.0 if args.quick else 90.0)
    scenarios = [s for s in args.scenarios.split(",") if s]
    unknown = [s for s in scenarios if s not in SCENARIOS]
    if unknown or args.jobs < 3 or pg_down < 0:
        parser.error(f"unknown scenario {unknown}" if unknown else "--jobs >= 3, --pg-down >= 0")
    hopfuse = args.hopfuse or next(
        (p for p in (ROOT / "target/release/hopfuse", ROOT / "target/debug/hopfuse") if p.exists()),
        None)
    if hopfuse is None or not hopfuse.exists():
        log("no hopfuse binary: build it (cargo build -p hopfuse-runner) or pass --hopfuse")
        return 2
    work = args.work_dir or Path(tempfile.mkdtemp(prefix="hopfuse-outage-"))
    work.mkdir(parents=True, exist_ok=True)
    log(f"logs and data in {work}; {hopfuse}")
    cluster = None
    rows = []
    try:
        cluster = Cluster(hopfuse, work)
        for scenario in scenarios:
            log(f"{scenario}: {args.jobs} jobs")
            row = burst(cluster, scenario, args.jobs, pg_down, wait_s=120 + pg_down)
            log(f"{scenario}: {row['fault']}: {json.dumps(row)}")
            rows.append(row)
    except SetupError as e:
        log(str(e))
        return 2
    finally:
        if cluster:
            cluster.stop()
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2) + "\n")
    failed = [r["scenario"] for r in rows
              if r["lost"] or r["stuck"] or r["stored"] < r["ended"]]
    if failed:
        log(f"FAIL: jobs lost, stuck or not stored in {', '.join(failed)}; logs in {work}")
        return 1
    log(f"PASS: every accepted job ended and was stored ({len(rows)} scenarios)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
