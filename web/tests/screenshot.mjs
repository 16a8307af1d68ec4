// The playground with a TMA example and a run result measured on the H100, for docs/.
//
//   node web/tests/screenshot.mjs RECORDING.sse HEALTH.json OUT.png [DIST] [--profile]
//
// --profile: the recording is a run with a profile (record-run.py --profile); the page has
// "profile (ncu)" on and the shot shows the Run pane scrolled to the profile.
//
// The GPU machine has no browser, so the run is recorded there (scripts/record-run.py against
// `hopfuse serve` with the real worker: the exact server-sent events of the job) together with
// that service's /api/health; here the page is served by `hopfuse serve --fake-worker` and the
// two answers are replayed from the recording (so the page shows the H100's numbers, not the
// fake worker's). Nothing in the result is edited.
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { startServe } from "./serve.mjs";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const flags = process.argv.slice(2).filter((a) => a.startsWith("--"));
const [recording, health, out, distArg] = process.argv.slice(2).filter((a) => !a.startsWith("--"));
const withProfile = flags.includes("--profile");
if (!recording || !health || !out || flags.some((f) => f !== "--profile")) {
  console.error("usage: node web/tests/screenshot.mjs RECORDING.sse HEALTH.json OUT.png [DIST] [--profile]");
  process.exit(2);
}
const dist = path.resolve(distArg ?? "dist");
const bin = path.resolve(process.env.HOPFUSE_BIN ?? path.join(repo, "target/release/hopfuse"));
const events = fs.readFileSync(recording, "utf8");
const healthJson = fs.readFileSync(health, "utf8");
const done = events.split("\n\n").find((b) => b.startsWith("event: done"));
if (!done) throw new Error(`${recording} has no done event`);
const result = JSON.parse(done.split("\ndata: ")[1]).result;
if (withProfile && !result.result?.profile?.measured) {
  throw new Error(`${recording} has no measured profile: ${JSON.stringify(result.result?.profile ?? null).slice(0, 300)}`);
}
const source = result.request?.source ?? fs.readFileSync(path.join(repo, "examples/tma/exp_2d.hf"), "utf8");

const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "hopfuse-shot-"));
const service = await startServe(bin, "playground service", [
  "--addr", "127.0.0.1:0", "--static-dir", dist, "--data-dir", tmp, "--fake-worker",
]);
const origin = service.origin;
const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await browser.newPage({ viewport: { width: 1500, height: withProfile ? 1150 : 950 } });
  await page.route("**/api/health", (r) => r.fulfill({ status: 200, contentType: "application/json", body: healthJson }));
  await page.route("**/api/jobs/*/events", (r) =>
    r.fulfill({ status: 200, headers: { "Content-Type": "text/event-stream" }, body: events }),
  );
  await page.goto(`${origin}/`);
  await page.waitForSelector("#lowered");
  await page.selectOption("#examples", "tma/exp_2d");
  for (const [name, value] of Object.entries(result.request?.sizes ?? { M: 8192, N: 8192 })) {
    await page.fill(`input[data-size="${name}"]`, String(value));
    await page.press(`input[data-size="${name}"]`, "Enter");
  }
  if (!source.includes("exp_2d")) throw new Error("the recording is not the exp_2d example");
  if (withProfile) {
    await page.click("#tab-run");
    await page.check("#profile-toggle");
  }
  await page.click("#run");
  await page.waitForSelector("#median", { timeout: 30000 });
  if (withProfile) {
    await page.waitForSelector("#roofline svg");
    // The profile's heading at the top of the Run pane, the roofline below it.
    await page.locator("#profile").evaluate((e) => e.scrollIntoView({ block: "start" }));
  }
  await page.screenshot({ path: out });
  console.log(`screenshot: ${out} (median ${await page.locator("#median").textContent()})`);
} finally {
  await browser.close();
  await service.stop();
  fs.rmSync(tmp, { recursive: true, force: true });
}
