// End-to-end test of the playground in headless Debian Chromium (playwright-core), against the
// real service: `hopfuse serve --fake-worker` started here on a free port with a temporary
// database, serving the built dist/ (and always stopped here, whatever happens).
//
// Against the fake-worker service: the page loads with no console error and says the runner is a
// fake; an example shows its CUDA; typing changes the CUDA; a syntax error shows a lint mark and
// its message; the Passes and Launch plan panes; the fragment link restores the state in a new
// page; tab B (a copy of A, its own CUDA, restored with A from a fragment); the Pipeline pane
// (exp_2d's diagram with 4 slots, in both themes; none for a kernel without TMA); Run shows the
// fake worker's result (marked as not measured, no numbers) with its stages; with tab B, an A/B
// job with both results (and B/A with its spread from the runner's A/B `done` event); a matrix
// product's TFLOP/s against cuBLAS (events recorded from a run on the H100); the PyTorch pane
// and a run with peers ("x1.30 vs torch.compile" and its spread, from the runner's peers event);
// a hung job is shown as timed out, a crashed one as crashed, and Stop waiting lets go of a job;
// the short link (through /api/links) restores the state in a new page, and again after the
// service restarts on the same database.
// Against a second service with no GPU, a token and CORS for the first one's origin (set as the
// runner URL in Settings): 401 without the right token, then runs refused with the 503's reason.
// Against a plain static server (no API at all): the page says no runner is reachable and
// compiling keeps working.
// Screenshots go to the artifacts directory.
//
// Usage: node web/tests/e2e.mjs [dist dir] [artifacts dir]
//   $HOPFUSE_BIN: the hopfuse binary (default target/release/hopfuse)

import http from "node:http";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";
import { fileURLToPath } from "node:url";
import { chromium } from "playwright-core";
import { startServe } from "./serve.mjs";

const repo = path.resolve(path.dirname(fileURLToPath(import.meta.url)), "../..");
const dist = path.resolve(process.argv[2] ?? "dist");
const artifacts = path.resolve(process.argv[3] ?? "target/web-artifacts");
const bin = path.resolve(process.env.HOPFUSE_BIN ?? path.join(repo, "target/release/hopfuse"));
fs.mkdirSync(artifacts, { recursive: true });
if (!fs.existsSync(bin)) {
  console.error(`e2e: ${bin} is missing (cargo build --release -p hopfuse-runner)`);
  process.exit(1);
}
const tmp = fs.mkdtempSync(path.join(os.tmpdir(), "hopfuse-e2e-"));

// ---- services ----------------------------------------------------------------------------------

// Every service this test started; killed on any exit (a failure, an exception, Ctrl-C). Their
// workers die with them (PR_SET_PDEATHSIG).
const children = new Set();
function killAll() {
  for (const c of children) c.kill("SIGKILL");
  children.clear();
}
process.on("exit", () => {
  killAll();
  fs.rmSync(tmp, { recursive: true, force: true });
});
for (const sig of ["SIGINT", "SIGTERM", "SIGHUP"]) process.on(sig, () => process.exit(130));

/** Starts `hopfuse serve ARGS` (killed with the other services on exit). */
const serve = (name, args, env = {}) => startServe(bin, name, args, env, children);

const dataA = path.join(tmp, "fake");
// The fake worker, with its test hook reading `// fake-behaviour: hang|crash` from the program,
// and a short job limit so a hung job is killed quickly.
const fakeArgs = (addr) => [
  "--addr", addr, "--static-dir", dist, "--data-dir", dataA, "--db", path.join(dataA, "e2e.db"),
  "--fake-worker", "--fake-behaviour", "from-program", "--job-timeout", "3",
];
let A = await serve("fake-worker service", fakeArgs("127.0.0.1:0"));
// No GPU (CUDA_VISIBLE_DEVICES empty, so also on a GPU machine), a token, CORS for A's pages.
const B = await serve(
  "no-GPU service",
  ["--addr", "127.0.0.1:0", "--static-dir", dist, "--data-dir", path.join(tmp, "nogpu"), "--token", "secret-token", "--cors-origin", A.origin],
  { CUDA_VISIBLE_DEVICES: "" },
);

// A plain static server with no API (like `python3 -m http.server`).
const MIME = { ".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8", ".css": "text/css; charset=utf-8", ".wasm": "application/wasm" };
const plain = http.createServer((req, res) => {
  const url = new URL(req.url, "http://localhost");
  const file = path.join(dist, url.pathname === "/" ? "index.html" : path.normalize(url.pathname));
  if (!file.startsWith(dist) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    res.writeHead(404, { "Content-Type": "text/plain" });
    return res.end("File not found");
  }
  res.writeHead(200, { "Content-Type": MIME[path.extname(file)] ?? "application/octet-stream" });
  fs.createReadStream(file).pipe(res);
});
await new Promise((r) => plain.listen(0, "127.0.0.1", r));
const plainBase = `http://127.0.0.1:${plain.address().port}/`;

// ---- helpers -----------------------------------------------------------------------------------

let passed = 0;
let failed = 0;
async function check(name, fn) {
  try {
    await fn();
    passed++;
    console.log(`ok   ${name}`);
  } catch (e) {
    failed++;
    console.log(`FAIL ${name}\n     ${String(e && e.stack ? e.stack : e).split("\n").slice(0, 4).join("\n     ")}`);
  }
}
function assert(cond, msg) {
  if (!cond) throw new Error(msg);
}

const errors = [];
/** A new page (a new browser context: its own localStorage). `allow(text, url)` names console
 * errors this page expects (the browser logs every failed request as one). */
async function open(browser, url, allow = () => false) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    const from = m.location()?.url ?? "";
    if (!allow(m.text(), from)) errors.push(`${url}: ${m.text()} (${from})`);
  });
  page.on("pageerror", (e) => errors.push(`${url}: ${e.message}`));
  await page.goto(url);
  await page.waitForFunction(() => /lowered in/.test(document.querySelector("#lowered")?.textContent));
  await page.waitForSelector(".editor .cm-content");
  return page;
}
const cuda = (page) => page.locator("#cuda .cm-content").textContent();
// The programs here fit in the viewport, so every line is in the DOM.
const editorText = (page) =>
  page.evaluate(() => Array.from(document.querySelectorAll(".editor .cm-line"), (l) => l.textContent).join("\n"));
async function replaceProgram(page, text) {
  await page.locator(".editor .cm-content").click();
  await page.keyboard.press("Control+A");
  await page.keyboard.insertText(text);
}
async function setSize(page, name, value) {
  await page.fill(`input[data-size="${name}"]`, String(value));
  await page.press(`input[data-size="${name}"]`, "Enter");
}
const runnerStatus = (page) => page.locator("#runner-status").textContent();
/**
 * Makes the page's next job events a `queued` event and then the `done` event of
 * web/tests/fixtures/NAME (serialized from the runner's types by runner/tests/api_fixtures.rs),
 * in place of the fake worker's. Unroute "**\/api/jobs/*\/events" after the run.
 */
async function replayDone(page, name) {
  const done = fs.readFileSync(path.join(repo, "web/tests/fixtures", name), "utf8");
  await page.route("**/api/jobs/*/events", (route) =>
    route.fulfill({
      status: 200,
      headers: { "Content-Type": "text/event-stream" },
      body: `event: queued\ndata: {"stage":"queued","position":0,"elapsed_ms":0}\n\nevent: done\ndata: ${JSON.stringify(JSON.parse(done))}\n\n`,
    }),
  );
}

async function getJson(url) {
  const res = await fetch(url);
  return { status: res.status, body: await res.json() };
}

const ADD = fs.readFileSync(path.join(repo, "examples/basics/add.hf"), "utf8");

// ---- the test ----------------------------------------------------------------------------------

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
let shortUrl = null;
let shortProgram = null;
try {
  const page = await open(browser, A.base);

  await check("page loads from hopfuse serve, compiles the first example, says the runner is a fake", async () => {
    const t = await page.locator("#lowered").textContent();
    assert(/^lowered in \d+\.\d ms$/.test(t), `status: ${t}`);
    assert((await cuda(page)).includes("add_kernel"), "first example's CUDA");
    assert((await page.locator("#examples option").count()) >= 6, "examples listed");
    await page.waitForFunction(() => !/checking/.test(document.querySelector("#runner-status").textContent));
    const status = await runnerStatus(page);
    assert(/fake runner: no GPU/.test(status), `runner status: ${status}`);
  });

  await check("choosing an example shows its CUDA", async () => {
    await page.selectOption("#examples", "basics/softmax");
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("softmax_kernel"));
    assert((await editorText(page)).includes("fusion softmax"), "editor holds the example");
    await page.selectOption("#examples", "basics/row_sum");
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("row_sum_kernel"));
  });

  await check("typing changes the CUDA", async () => {
    await page.selectOption("#examples", "basics/add");
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(128)"));
    await replaceProgram(page, ADD.replace("c.split(0, 128)", "c.split(0, 256)"));
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(256)"));
    assert((await page.inputValue("#examples")) === "", "an edited program is no longer the example");
  });

  await check("a syntax error shows a lint mark and its message", async () => {
    await replaceProgram(page, "fusion f {\n  input x: f32[M]\n  y = exp(x\n  output y\n}\nschedule {\n}\n");
    await page.waitForSelector(".editor .cm-lintRange-error");
    const status = await page.locator("#diagnostics").textContent();
    assert(/error at 4:3: expected/.test(status), `status bar: ${status}`);
    const message = status.replace(/^error at \d+:\d+: /, "");
    await page.locator(".editor .cm-lintRange-error").first().hover();
    const tip = await page.waitForSelector(".cm-tooltip-lint");
    assert((await tip.textContent()).includes(message), `tooltip: ${await tip.textContent()}`);
    assert(await page.locator(".editor .cm-lint-marker-error").count(), "gutter marker");
    assert(await page.locator("#pane-cuda .stale").isVisible(), "CUDA pane says it is the last good compile");
    await replaceProgram(page, ADD);
    await page.waitForFunction(() => !document.querySelector(".editor .cm-lintRange-error"));
  });

  await check("passes pane: list, IR after a pass, diff, unchanged passes greyed", async () => {
    await page.click("#tab-passes");
    const n = await page.locator(".pass").count();
    assert(n >= 8, `passes: ${n}`);
    await page.click('.pass[data-pass="indexing"]');
    await page.waitForFunction(() => document.querySelector("#pass-ir-view .cm-content").textContent.length > 20);
    await page.click("#pass-diff");
    await page.waitForSelector("#pass-diff-view .d-add");
    const unchanged = await page.locator(".pass.unchanged").count();
    console.log(`     (${unchanged} of ${n} passes changed nothing for add)`);
  });

  await check("launch plan pane evaluates grid and block with the sizes", async () => {
    await page.click("#tab-plan");
    await setSize(page, "M", 1000);
    await setSize(page, "N", 1024);
    const grid = await page.locator("#plan-grid").textContent();
    assert(grid.includes("= 2000"), `grid: ${grid}`); // ceilDiv(1000*1024, 512)
    assert((await page.locator("#plan-block").textContent()).startsWith("128"), "block");
  });

  await check("the fragment link restores the state in a new page", async () => {
    await page.click("#tab-passes");
    await page.click('.pass[data-pass="predicate"]');
    await page.click("#pass-diff");
    await page.waitForFunction(() => location.hash.length > 10);
    const url = page.url();
    assert(/#v1:[A-Za-z0-9_-]+$/.test(url), `url: ${url}`);
    const before = await editorText(page);
    const p2 = await open(browser, url);
    assert((await editorText(p2)) === before, "program restored");
    assert((await p2.getAttribute("#tab-passes", "aria-selected")) === "true", "pane restored");
    assert(await p2.locator('.pass.selected[data-pass="predicate"]').count(), "pass restored");
    assert(await p2.locator("#pass-diff.active").count(), "diff mode restored");
    assert((await p2.inputValue('input[data-size="M"]')) === "1000", "sizes restored");
    await p2.click("#tab-cuda"); // the CUDA viewer was made while its pane was hidden
    await p2.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("add_kernel"));
    await p2.close();
  });

  await check("download .cu and the resizable divider", async () => {
    await page.click("#tab-cuda");
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("#download-cuda")]);
    assert(download.suggestedFilename() === "add_kernel.cu", `file: ${download.suggestedFilename()}`);
    const saved = path.join(artifacts, "add_kernel.cu");
    await download.saveAs(saved);
    const file = fs.readFileSync(saved, "utf8");
    assert(file.includes("add_kernel") && file.includes("__launch_bounds__(128)"), "the file is the current CUDA");
    const width = () => page.locator(".editor-pane").evaluate((e) => e.getBoundingClientRect().width);
    const before = await width();
    const bar = await page.locator(".splitter").boundingBox();
    await page.mouse.move(bar.x + 3, bar.y + 200);
    await page.mouse.down();
    await page.mouse.move(bar.x + 203, bar.y + 200, { steps: 5 });
    await page.mouse.up();
    const after = await width();
    assert(Math.abs(after - before - 200) < 12, `editor width ${before} -> ${after}`);
  });

  await check("help dialog, theme switch, toggle comment", async () => {
    await page.keyboard.press("F1");
    await page.waitForSelector("#help-dialog");
    assert((await page.locator("#help-dialog").textContent()).includes("Ctrl+Enter"), "shortcuts listed");
    await page.keyboard.press("Escape");
    await page.waitForSelector("#help-dialog", { state: "detached" });
    await page.keyboard.press("Alt+3");
    assert((await page.getAttribute("#tab-plan", "aria-selected")) === "true", "Alt+3 shows the launch plan");
    await page.keyboard.press("Alt+1");
    assert((await page.getAttribute("#tab-cuda", "aria-selected")) === "true", "Alt+1 shows the CUDA");
    await page.click("#theme");
    const dark = await page.evaluate(() => document.documentElement.classList.contains("dark"));
    await page.click("#theme");
    assert(dark !== (await page.evaluate(() => document.documentElement.classList.contains("dark"))), "theme toggles");
    await page.locator(".editor .cm-line").nth(1).click();
    await page.keyboard.press("Control+/");
    assert((await editorText(page)).split("\n")[1].startsWith("// fusion add"), "line commented");
    await page.keyboard.press("Control+/");
    assert((await editorText(page)).split("\n")[1].startsWith("fusion add"), "line uncommented");
  });

  await check("tab B: + B copies A, editing B changes only B's CUDA, a fragment restores both tabs", async () => {
    await page.selectOption("#examples", "basics/add");
    await page.click("#tab-cuda");
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(128)"));
    assert(!(await page.locator("#edit-b").count()), "no tab B before + B");
    const a = await editorText(page);
    await page.click("#open-b");
    await page.waitForSelector("#edit-b.active");
    assert((await editorText(page)) === a, "B starts as a copy of A");
    await replaceProgram(page, ADD.replace("c.split(0, 128)", "c.split(0, 256)"));
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(256)"));
    assert((await page.inputValue("#examples")) === "", "B is no longer the example");
    await page.click("#edit-a");
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(128)"));
    assert((await editorText(page)) === a, "A is unchanged");
    assert((await page.inputValue("#examples")) === "basics/add", "A is still the example");
    await page.click("#edit-b");
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(256)"));
    assert((await editorText(page)).includes("c.split(0, 256)"), "B kept its edit");
    // The fragment holds both programs and the tab shown.
    await page.waitForFunction(() => location.hash.length > 10);
    const p2 = await open(browser, page.url());
    await p2.waitForSelector("#edit-b.active");
    assert((await editorText(p2)).includes("c.split(0, 256)"), "B restored and shown");
    await p2.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(256)"));
    await p2.click("#edit-a");
    await p2.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(128)"));
    assert((await editorText(p2)) === a, "A restored");
    await p2.close();
    await page.click("#close-b");
    await page.waitForSelector("#open-b");
    assert((await page.getAttribute("#edit-a", "aria-selected")) === "true", "A shown after closing B");
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(128)"));
  });

  await check("Pipeline pane: exp_2d's diagram has 4 slots, in both themes; add has no pipeline", async () => {
    await page.selectOption("#examples", "tma/exp_2d");
    await page.click("#tab-pipeline");
    await page.waitForSelector("#pane-pipeline svg.pl-svg");
    assert((await page.locator("#pane-pipeline svg .pl-slot").count()) === 4, "4 slots");
    const svg = page.locator("#pane-pipeline svg.pl-svg");
    const text = await svg.textContent();
    for (const s of ["slot 3", "producer", "consumers", "load x → x_s[0]", "TMA 2-D · 2.0 KiB", "expect_tx 2048 B", "wait x_s_full[2]", "x_s_full[3]", "__syncthreads()"]) {
      assert(text.includes(s), `diagram shows ${s}`);
    }
    const box = await svg.boundingBox();
    assert(box && box.width > 400 && box.height > 200, `diagram size: ${JSON.stringify(box)}`);
    const heading = await page.locator("#pane-pipeline .pipeline h3").textContent();
    assert(heading.startsWith("x → x_s: 4 stages of 2.0 KiB, 3 loaded ahead, loop n_o"), `heading: ${heading}`);
    // The colours are the theme's: text and slot boxes change with it.
    const colours = () =>
      page.evaluate(() => [".pl-strong", ".pl-slot-box"].map((c) => {
        const st = getComputedStyle(document.querySelector(`#pane-pipeline ${c}`));
        return `${st.fill}/${st.stroke}`;
      }).join(" "));
    const light = await colours();
    await page.screenshot({ path: path.join(artifacts, "playground-pipeline.png") });
    await page.click("#theme");
    const dark = await colours();
    await page.screenshot({ path: path.join(artifacts, "playground-pipeline-dark.png") });
    await page.click("#theme");
    assert(light !== dark, `colours follow the theme: ${light} | ${dark}`);
    await page.selectOption("#examples", "basics/add");
    await page.waitForSelector("#no-pipeline");
    const none = await page.locator("#no-pipeline").textContent();
    assert(none === "no pipeline: this kernel has no TMA / circular-buffered loads", `says: ${none}`);
    assert(!(await page.locator("#pane-pipeline svg").count()), "no diagram");
  });

  await page.selectOption("#examples", "basics/softmax");
  await page.click("#tab-cuda");
  await page.screenshot({ path: path.join(artifacts, "playground.png") });
  await page.click("#theme");
  await page.click("#tab-passes");
  await page.screenshot({ path: path.join(artifacts, "playground-dark-passes.png") });
  await page.click("#theme");
  await page.close();

  // ---- runs through the fake worker -------------------------------------------------------------
  const q = await open(browser, A.base);
  const runResult = () => q.locator("#run-result").textContent();

  await check("Run (Ctrl+Enter) shows the fake worker's result, marked as not measured, with its stages", async () => {
    await setSize(q, "M", 1000);
    await q.locator(".editor .cm-content").click();
    await q.keyboard.press("Control+Enter");
    await q.waitForSelector("#run-status");
    const status = await q.locator("#run-status").textContent();
    assert(/^fake\s+compiled and checked by the fake worker: no GPU/.test(status), `status: ${status}`);
    assert(await q.locator("#fake-result").isVisible(), "the fake result");
    const text = await runResult();
    assert(text.includes("Not measured"), "says it was not measured");
    for (const s of ["add_kernel", "grid (8000, 1, 1)  block (128, 1, 1)", "i32 (every tensor has fewer than 2^31 elements)", "lowering"]) {
      assert(text.includes(s), `result shows ${s}: ${text}`);
    }
    // Never a number that looks like a measurement.
    assert(!(await q.locator("#median, #verdict, .ratio").count()), "no median, verdict or ceiling bar");
    assert(!/µs|GB\/s|validation\s*passed/.test(text), `no timing or bandwidth: ${text}`);
    const stages = await q.locator("#run-stages .stage").allTextContents();
    assert(stages[0] === "queued" && stages.includes("compiling") && stages.at(-1) === "done", `stages: ${stages}`);
    assert(!(await editorText(q)).includes("\n\n\n"), "Ctrl+Enter did not insert a line");
    // What the page sent, from the service's run history.
    const { body } = await getJson(`${A.origin}/api/runs?limit=1`);
    const sent = body.runs[0].request.request;
    assert(body.runs[0].status === "fake", `history: ${body.runs[0].status}`);
    assert(sent.source.includes("fusion add") && sent.sizes.M === 1000 && sent.sizes.N === 4096, `request: ${JSON.stringify(sent).slice(0, 200)}`);
    assert(sent.iters === 100 && sent.seed === 0, "iters and seed sent");
    await q.screenshot({ path: path.join(artifacts, "playground-run.png") });
  });

  await check("with tab B, Run sends an A/B job and shows the fake worker's two results", async () => {
    await q.click("#open-b");
    await q.waitForSelector("#edit-b.active");
    await replaceProgram(q, ADD.replace("c.split(0, 128)", "c.split(0, 256)"));
    await q.keyboard.press("Control+Enter"); // at once: B's edit is still in the debounce
    await q.waitForSelector("#run-b .run-status");
    const a = await q.locator("#run-a .run-status").textContent();
    const b = await q.locator("#run-b .run-status").textContent();
    assert(/^fake\s/.test(a) && /^fake\s/.test(b), `statuses: ${a} | ${b}`);
    const ta = await q.locator("#run-a").textContent();
    const tb = await q.locator("#run-b").textContent();
    assert(ta.includes("Not measured") && tb.includes("Not measured"), "both not measured");
    assert(ta.includes("grid (8000, 1, 1)  block (128, 1, 1)"), `A's launch: ${ta}`);
    assert(tb.includes("grid (4000, 1, 1)  block (256, 1, 1)"), `B's launch: ${tb}`);
    const none = await q.locator("#ab-none").textContent();
    assert(none.includes("the fake worker measures nothing"), `no ratio: ${none}`);
    assert(!(await q.locator("#ab-ratio, #median").count()), "no ratio, no numbers");
    // The history is written when the job ends, which can be just after the page shows it, and
    // runs finished within the same instant may come in either order: look at the last few.
    let req = null;
    for (let i = 0; i < 50 && !req?.request_b; i++) {
      const { body } = await getJson(`${A.origin}/api/runs?limit=10`);
      req = body.runs.map((r) => r.request).find((r) => r?.request_b);
      if (!req?.request_b) await new Promise((r) => setTimeout(r, 100));
    }
    assert(req?.request_b, `the A/B run is in the history: ${JSON.stringify(req).slice(0, 300)}`);
    assert(req.request.source.includes("c.split(0, 128)") && req.request_b.source.includes("c.split(0, 256)"), `sent: ${JSON.stringify(req).slice(0, 300)}`);
    assert(req.request_b.sizes.M === 1000 && req.same_inputs === true, "same sizes, same inputs");
  });

  await check("an A/B result with a comparison shows B/A and its spread (the runner's A/B done event)", async () => {
    // A GPU runner's answer; the fake worker never measures.
    await replayDone(q, "done-ab.json");
    await q.click("#run");
    await q.waitForSelector("#ab-ratio");
    await q.unroute("**/api/jobs/*/events");
    assert((await q.locator("#ab-ratio .value").textContent()) === "0.900", "the median ratio");
    assert((await q.locator("#ab-spread").textContent()) === "0.875 – 0.938", "the spread");
    const t = await q.locator("#ab-text").textContent();
    assert(t === "B/A = 0.900 (0.875–0.938 over 100 pairs): B is 10.0% faster than A", `text: ${t}`);
    assert((await q.locator("#run-a #median").textContent()) === "2.50 µs", "A's median");
    assert((await q.locator("#run-b").textContent()).includes("2.25 µs"), "B's median");
    assert((await q.locator("#run-a .verdict").textContent()).includes("passed"), "A validated");
    await q.screenshot({ path: path.join(artifacts, "playground-ab.png") });
    await q.click("#close-b");
    await q.waitForSelector("#open-b");
  });

  await check("a matrix product shows TFLOP/s against cuBLAS (events recorded from a run on the H100)", async () => {
    // docs/recordings/matmul_h100.sse: every event of a real basics/matmul job on the H100
    // (scripts/record-run.py against `hopfuse serve` there), replayed in place of the fake
    // worker's events.
    const events = fs.readFileSync(path.join(repo, "docs/recordings/matmul_h100.sse"), "utf8");
    await q.selectOption("#examples", "basics/matmul");
    for (const name of ["M", "N", "K"]) await setSize(q, name, 2048);
    await q.route("**/api/jobs/*/events", (route) =>
      route.fulfill({ status: 200, headers: { "Content-Type": "text/event-stream" }, body: events }),
    );
    await q.click("#run");
    await q.waitForSelector("#rate");
    await q.unroute("**/api/jobs/*/events");
    const rate = await q.locator("#rate").textContent();
    assert(rate === "3.88 TFLOP/s", `the kernel's rate: ${rate}`);
    const ratio = await q.locator(".ratio-text").first().textContent();
    assert(ratio === "7.7% of cuBLAS (50.10 TFLOP/s)", `the ratio: ${ratio}`);
    const cublas = await q.locator("#cublas").textContent();
    assert(cublas.startsWith("cublasGemmEx(N, N, m=2048, n=2048, k=2048) f32 x f32 -> f32, compute 32F"), `the call: ${cublas}`);
    assert(cublas.includes("its output matches the reference"), `cuBLAS's check: ${cublas}`);
    assert((await q.locator(".verdict").first().textContent()).includes("passed"), "validated");
    await q.screenshot({ path: path.join(artifacts, "playground-matmul.png") });
    // Back to the sizes the later checks expect.
    await setSize(q, "M", 1000);
    await setSize(q, "N", 4096);
  });

  await check("the PyTorch pane shows the twin; with vs torch on, Run asks for peers and shows the speed-up over torch.compile with its spread (the runner's peers done event)", async () => {
    await q.click("#tab-torch");
    await q.waitForSelector("#pane-torch:not(.hidden) #torch-source");
    const twin = await q.locator("#torch-source").textContent();
    assert(twin.includes("def matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:"), `the twin: ${twin}`);
    assert(twin.includes("    c = a @ b\n"), `a GEMM, not a broadcast product: ${twin}`);
    await q.click("#tab-run");
    await q.check("#peers-toggle");
    // A GPU runner's answer with peers; the fake worker never measures.
    await replayDone(q, "done-peers.json");
    await q.click("#run");
    await q.waitForSelector("#vs-torch");
    await q.unroute("**/api/jobs/*/events");
    const vs = await q.locator("#vs-torch .value").textContent();
    assert(vs === "x1.30 vs torch.compile", `the speed-up: ${vs}`);
    const spread = await q.locator("#vs-torch-spread").textContent();
    assert(spread === "x1.25 – x1.34 over 5 rounds", `the spread: ${spread}`);
    const peers = await q.locator("#peers").textContent();
    assert(peers.includes("eager") && peers.includes("median 4.00 µs") && peers.includes("compiled in 14.5 s (not timed)"), `the peers: ${peers}`);
    // The request asked for peers (the service records it in the run history).
    let sent = null;
    for (let i = 0; i < 50 && !sent; i++) {
      const { body } = await getJson(`${A.origin}/api/runs?limit=10`);
      sent = body.runs.map((r) => r.request?.request).find((r) => r?.peers === true);
      if (!sent) await new Promise((r) => setTimeout(r, 100));
    }
    assert(sent?.source.includes("fusion matmul"), `peers requested: ${JSON.stringify(sent).slice(0, 200)}`);
    await q.screenshot({ path: path.join(artifacts, "playground-peers.png") });
    await q.uncheck("#peers-toggle");
  });

  await check("a job that hangs is killed at the limit and shown as timed out", async () => {
    await replaceProgram(q, ADD + "// fake-behaviour: hang\n");
    await q.click("#run");
    await q.waitForSelector(".stages .stage.now");
    await q.waitForSelector("#run-status", { timeout: 15000 });
    const status = await q.locator("#run-status").textContent();
    assert(/^timed_out/.test(status), `status: ${status}`);
    const msg = await q.locator("#run-error").textContent();
    assert(msg.startsWith("timed out: the kernel did not finish"), `message: ${msg}`);
    assert((await q.locator("#run-steps").textContent()) === "lowering → launch", "how far it got");
  });

  await check("a worker that crashes is shown as crashed with its stderr", async () => {
    await replaceProgram(q, ADD + "// fake-behaviour: crash\n");
    await q.click("#run");
    await q.waitForSelector("#run-status", { timeout: 15000 });
    const status = await q.locator("#run-status").textContent();
    assert(/^crashed/.test(status), `status: ${status}`);
    assert((await q.locator("#run-error").textContent()).includes("SIGABRT"), "the signal");
    assert((await q.locator("#run-stderr").textContent()).includes("crashing on purpose"), "the stderr");
  });

  await check("Stop waiting lets go of a job that does not finish", async () => {
    await replaceProgram(q, ADD + "// fake-behaviour: hang\n");
    await q.click("#run");
    await q.waitForSelector(".stages .stage.now");
    await q.click("#stop-waiting");
    const msg = await q.locator("#run-error").textContent();
    assert(/^Stopped waiting for job j[0-9a-f]+/.test(msg), `message: ${msg}`);
    assert(await q.locator("#run").isEnabled(), "Run is available again");
  });

  await check("a short link (Ctrl+S, POST /api/links) restores the state in a new page", async () => {
    shortProgram = ADD.replace("// Example 1", "// short link test");
    await replaceProgram(q, shortProgram);
    await q.keyboard.press("Control+S"); // at once: the edit is still in the debounce
    await q.waitForFunction(() => document.querySelector("#toast").textContent.includes("hort link"));
    const toast = await q.locator("#toast").textContent();
    shortUrl = toast.match(/(http\S+#s:[A-Za-z0-9]+)/)?.[1];
    assert(shortUrl && toast.startsWith("Short link copied"), `toast: ${toast}`);
    assert(shortUrl.startsWith(A.base), `link: ${shortUrl}`);
    const id = shortUrl.split("#s:")[1];
    const { status, body } = await getJson(`${A.origin}/api/links/${id}`);
    assert(status === 200 && body.program === shortProgram && body.state.sizes.M === 1000 && body.state.v === 1, `stored: ${JSON.stringify(body).slice(0, 300)}`);
    const p3 = await open(browser, shortUrl);
    await p3.waitForFunction(() => document.querySelector(".editor .cm-content").textContent.includes("short link test"));
    assert((await editorText(p3)) === shortProgram, "program restored exactly");
    assert((await p3.inputValue('input[data-size="M"]')) === "1000", "sizes restored");
    await p3.close();
  });
  await q.close();

  // ---- a runner with no GPU and a token, set in Settings --------------------------------------
  await check("settings: a runner URL and token are used; no GPU: runs refused with the reason", async () => {
    // The browser logs the refused runs (401, then 503) as failed requests: expected here.
    const r = await open(browser, A.base, (text, from) => from.startsWith(`${B.origin}/api/run`) && /status of (401|503)/.test(text));
    await r.click("#settings");
    await r.fill("#runner-url", B.base);
    await r.fill("#runner-token", "wrong-token");
    await r.click("#settings-save");
    await r.waitForFunction(() => /Reachable, no GPU/.test(document.querySelector("#settings-dialog").textContent));
    const note = await r.locator("#settings-dialog").textContent();
    assert(/Reachable, no GPU: runner \S+ · no usable GPU \(.+\)/.test(note), `settings: ${note}`);
    await r.keyboard.press("Escape");
    assert((await runnerStatus(r)).includes("(compile only)"), `status bar: ${await runnerStatus(r)}`);
    await r.click("#run");
    await r.waitForSelector("#run-error");
    let msg = await r.locator("#run-error").textContent();
    assert(/wants a token \(HTTP 401\): wrong token/.test(msg), `message: ${msg}`);
    await r.click("#settings");
    await r.fill("#runner-token", "secret-token");
    await r.click("#settings-save");
    await r.keyboard.press("Escape");
    await r.click("#run");
    await r.waitForFunction(() => /HTTP 503/.test(document.querySelector("#run-error")?.textContent ?? ""));
    msg = await r.locator("#run-error").textContent();
    assert(/cannot run programs \(HTTP 503\): runs are unavailable: no usable GPU \(.+\); compiling works/.test(msg), `message: ${msg}`);
    await r.screenshot({ path: path.join(artifacts, "playground-no-gpu.png") });
    await r.close();
  });

  await check("no runner at all (a static server): the page says so and compiling keeps working", async () => {
    // The browser logs the 404 of /api/health there: expected (the page says "no runner").
    const s = await open(browser, plainBase, (text, from) => /Failed to load resource/.test(text) && /\/api\//.test(from));
    await s.waitForFunction(() => /no runner/.test(document.querySelector("#runner-status").textContent));
    await s.click("#run");
    await s.waitForSelector("#run-error");
    const msg = await s.locator("#run-error").textContent();
    assert(msg.includes("No runner reachable"), `message: ${msg}`);
    await replaceProgram(s, ADD.replace("c.split(0, 128)", "c.split(0, 64)"));
    await s.click("#tab-cuda");
    await s.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(64)"));
    await s.close();
  });

  await check("the short link survives a restart of the service (same database)", async () => {
    assert(shortUrl, "no short link was made");
    await A.stop();
    A = await serve("fake-worker service (restarted)", fakeArgs(`127.0.0.1:${A.port}`));
    const p4 = await open(browser, shortUrl);
    await p4.waitForFunction(() => document.querySelector(".editor .cm-content").textContent.includes("short link test"));
    assert((await editorText(p4)) === shortProgram, "program restored exactly");
    await p4.close();
  });

  await check("no console errors", async () => {
    assert(errors.length === 0, errors.join("\n"));
  });
} finally {
  await browser.close();
  plain.close();
  plain.closeAllConnections?.();
  await Promise.all([A.stop(), B.stop()]);
  killAll();
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
