// Starting `hopfuse serve` for the browser tests (e2e.mjs) and the docs screenshot.
import { spawn } from "node:child_process";

/**
 * Starts `BIN serve ARGS`; resolves once it prints the address it listens on. The child is added
 * to `children` while it runs (callers kill that set on exit).
 */
export function startServe(bin, name, args, env = {}, children = new Set()) {
  const child = spawn(bin, ["serve", ...args], {
    stdio: ["ignore", "pipe", "pipe"],
    env: { ...process.env, RUST_LOG: "warn", ...env },
  });
  children.add(child);
  let log = "";
  const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve(code ?? signal)));
  exited.then(() => children.delete(child));
  const ready = new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`${name}: no address after 60 s:\n${log}`)), 60000);
    const read = (d) => {
      log += d;
      const m = /hopfuse serve: listening on (http:\/\/\S+)/.exec(log);
      if (m) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    };
    child.stdout.on("data", read);
    child.stderr.on("data", read);
    exited.then((how) => {
      clearTimeout(timer);
      reject(new Error(`${name}: hopfuse serve exited (${how}):\n${log}`));
    });
  });
  return ready.then((origin) => ({
    origin,
    base: `${origin}/`,
    port: Number(new URL(origin).port),
    log: () => log,
    /** SIGTERM (graceful), SIGKILL if it is still there after 10 s. */
    async stop() {
      if (child.exitCode !== null || child.signalCode !== null) return;
      child.kill("SIGTERM");
      const t = setTimeout(() => child.kill("SIGKILL"), 10000);
      await exited;
      clearTimeout(t);
    },
  }));
}
