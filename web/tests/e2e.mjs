// End-to-end test of the playground in headless Debian Chromium (playwright-core), against the
// built dist/ served by a tiny static server that this test starts and stops.
//
// Part 1, a plain static server (no runner API, like `python3 -m http.server`): the page loads
// with no console error, an example shows its CUDA, typing changes the CUDA, a syntax error shows
// a lint mark and its message, the Passes and Launch plan panes, the fragment link restores the
// state in a new page, Run says clearly that no runner is reachable, screenshots.
// Part 2, the same server with a FAKE runner that follows the documented API of issue 5
// (POST /api/run, SSE /api/jobs/{id}/events, /api/links, /api/health): Run streams progress and
// shows the result; a short link restores the state in a new page. The fake checks the request
// bodies the page sends.
//
// Usage: node web/tests/e2e.mjs [dist dir] [artifacts dir]

import http from "node:http";
import fs from "node:fs";
import path from "node:path";
import { chromium } from "playwright-core";

const root = path.resolve(process.argv[2] ?? "dist");
const artifacts = path.resolve(process.argv[3] ?? "target/web-artifacts");
fs.mkdirSync(artifacts, { recursive: true });

const MIME = {
  ".html": "text/html; charset=utf-8",
  ".js": "text/javascript; charset=utf-8",
  ".css": "text/css; charset=utf-8",
  ".wasm": "application/wasm",
};

// ---- the server --------------------------------------------------------------------------------

const fake = { enabled: false, runs: [], links: new Map(), auth: [] };

const RESULT = {
  file: "playground.hf",
  kernel: "add_kernel",
  sizes: { M: 1000, N: 1024 },
  seed: 7,
  launch: { grid: [500, 1, 1], block: [128, 1, 1], dynamic_smem_bytes: 0 },
  attributes: { registers_per_thread: 24, local_bytes_per_thread: 0, static_smem_bytes: 0, max_threads_per_block: 1024 },
  nvrtc_ms: 41.5,
  device: { name: "FAKE H100 (test)" },
  timing: { samples: 20, min_us: 2.25, median_us: 2.5, max_us: 3.0 },
  min_global_bytes: 12288000,
  gbps: 2900.4,
  copy: { buffer_bytes: 1 << 28, timing: { samples: 20, min_us: 1, median_us: 1, max_us: 1 }, gbps: 3100.0 },
  fraction_of_copy: 0.9356,
  validation: [{ output: "c", dtype: "f32", elements: 1024000, rel_l2: 1.2e-8, max_abs: 4.7e-7, tolerance: 1e-5, non_finite: 0, passed: true }],
  passed: true,
  nvrtc_log: "",
};

function json(res, status, body) {
  res.writeHead(status, { "Content-Type": "application/json" });
  res.end(JSON.stringify(body));
}

function readBody(req) {
  return new Promise((resolve) => {
    let b = "";
    req.on("data", (c) => (b += c));
    req.on("end", () => resolve(b));
  });
}

async function api(req, res, url) {
  fake.auth.push(req.headers.authorization ?? "");
  if (url.pathname === "/api/health") return json(res, 200, { version: "fake", gpu: { name: "FAKE H100 (test)" }, queue: 0 });
  if (url.pathname === "/api/run" && req.method === "POST") {
    const body = JSON.parse(await readBody(req));
    fake.runs.push(body);
    const id = `job${fake.runs.length}`;
    if (body.program.includes("// hang")) fake.hang = id; // its events stop after "queued"
    return json(res, 200, { job_id: id });
  }
  const ev = url.pathname.match(/^\/api\/jobs\/([^/]+)\/events$/);
  if (ev) {
    res.writeHead(200, { "Content-Type": "text/event-stream", "Cache-Control": "no-cache" });
    const events = [
      ["queued", { job_id: ev[1] }],
      ["compiling", {}],
      ["running", {}],
      ["validating", {}],
      ["done", { result: RESULT }],
    ];
    let i = 0;
    if (fake.hang === ev[1]) events.length = 1;
    const tick = () => {
      if (i === events.length && fake.hang === ev[1]) return; // keep the stream open
      if (i === events.length) return res.end();
      const [name, data] = events[i++];
      res.write(`event: ${name}\ndata: ${JSON.stringify(data)}\n\n`);
      setTimeout(tick, 60);
    };
    return tick();
  }
  if (url.pathname === "/api/links" && req.method === "POST") {
    const { state } = JSON.parse(await readBody(req));
    const id = `L${fake.links.size + 1}`;
    fake.links.set(id, state);
    return json(res, 200, { id });
  }
  const link = url.pathname.match(/^\/api\/links\/([^/]+)$/);
  if (link && fake.links.has(link[1])) return json(res, 200, { state: fake.links.get(link[1]) });
  return json(res, 404, { error: "not found" });
}

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, "http://localhost");
  if (url.pathname.startsWith("/api/")) {
    if (fake.enabled) return api(req, res, url);
    res.writeHead(404, { "Content-Type": "text/plain" }); // a static server: no API
    return res.end("File not found");
  }
  const file = path.join(root, url.pathname === "/" ? "index.html" : path.normalize(url.pathname));
  if (!file.startsWith(root) || !fs.existsSync(file) || !fs.statSync(file).isFile()) {
    res.writeHead(404);
    return res.end("File not found");
  }
  res.writeHead(200, { "Content-Type": MIME[path.extname(file)] ?? "application/octet-stream" });
  fs.createReadStream(file).pipe(res);
});
await new Promise((r) => server.listen(0, "127.0.0.1", r));
const base = `http://127.0.0.1:${server.address().port}/`;

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
async function open(browser, url) {
  const page = await browser.newPage({ viewport: { width: 1400, height: 860 } });
  page.on("console", (m) => {
    if (m.type() !== "error") return;
    // The runner probe on a static server: the browser logs the 404 of /api/health (expected
    // there, and the page says "no runner"); any other console error fails the test.
    const from = m.location()?.url ?? "";
    if (!fake.enabled && /Failed to load resource/.test(m.text()) && /\/api\//.test(from)) return;
    errors.push(`${url}: ${m.text()} (${from})`);
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

const ADD = fs.readFileSync(path.resolve(root, "../examples/basics/add.hf"), "utf8");

// ---- the test ----------------------------------------------------------------------------------

const browser = await chromium.launch({
  executablePath: "/usr/bin/chromium",
  args: ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update", "--disable-sync"],
});
try {
  const page = await open(browser, base);

  await check("page loads, compiles the first example and shows the lowering time", async () => {
    const t = await page.locator("#lowered").textContent();
    assert(/^lowered in \d+\.\d ms$/.test(t), `status: ${t}`);
    assert((await cuda(page)).includes("add_kernel"), "first example's CUDA");
    assert((await page.locator("#examples option").count()) >= 6, "examples listed");
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
    assert(await page.locator(".stale").isVisible(), "CUDA pane says it is the last good compile");
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
    await page.fill('input[data-size="M"]', "1000");
    await page.press('input[data-size="M"]', "Enter");
    await page.fill('input[data-size="N"]', "1024");
    await page.press('input[data-size="N"]', "Enter");
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

  await check("Run without a runner says so, compile keeps working", async () => {
    await page.click("#run");
    await page.waitForSelector("#run-error");
    const msg = await page.locator("#run-error").textContent();
    assert(msg.includes("No runner reachable"), `message: ${msg}`);
    assert((await page.locator("#runner-status").textContent()).includes("no runner"), "status bar");
    await replaceProgram(page, ADD.replace("c.split(0, 128)", "c.split(0, 64)"));
    await page.waitForFunction(() => document.querySelector("#cuda .cm-content").textContent.includes("__launch_bounds__(64)"));
  });

  await check("download .cu and the resizable divider", async () => {
    await page.click("#tab-cuda");
    const [download] = await Promise.all([page.waitForEvent("download"), page.click("#download-cuda")]);
    assert(download.suggestedFilename() === "add_kernel.cu", `file: ${download.suggestedFilename()}`);
    const saved = path.join(artifacts, "add_kernel.cu");
    await download.saveAs(saved);
    assert(fs.readFileSync(saved, "utf8").includes("__launch_bounds__(64)"), "the file is the current CUDA");
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

  await page.selectOption("#examples", "basics/softmax");
  await page.click("#tab-cuda");
  await page.screenshot({ path: path.join(artifacts, "playground.png") });
  await page.click("#theme");
  await page.click("#tab-passes");
  await page.screenshot({ path: path.join(artifacts, "playground-dark-passes.png") });
  await page.click("#theme");
  await page.close();

  // ---- part 2: a fake runner --------------------------------------------------------------------
  fake.enabled = true;
  const q = await open(browser, base);

  await check("Run against a fake runner streams progress and shows the result", async () => {
    await q.waitForFunction(() => document.querySelector("#runner-status").textContent.includes("FAKE H100"));
    await q.fill('input[data-size="M"]', "1000");
    await q.press('input[data-size="M"]', "Enter");
    await q.locator(".editor .cm-content").click();
    await q.keyboard.press("Control+Enter");
    await q.waitForSelector(".stages .stage.now");
    await q.waitForSelector("#median");
    assert((await q.locator("#median").textContent()) === "2.50 µs", "median");
    const text = await q.locator("#run-result").textContent();
    assert((await q.locator("#verdict").textContent()) === "validationpassed", "verdict");
    for (const s of ["2900 GB/s", "93.6% of the copy ceiling", "FAKE H100", "1.200e-8"]) {
      assert(text.includes(s), `result shows ${s}`);
    }
    const sent = fake.runs.at(-1);
    assert(sent.program.includes("fusion add") && sent.sizes.M === 1000 && sent.sizes.N === 4096, `request: ${JSON.stringify(sent).slice(0, 200)}`);
    assert(sent.iters === 100 && sent.seed === 0, "iters and seed sent");
    assert(!(await editorText(q)).includes("\n\n\n"), "Ctrl+Enter did not insert a line");
    await q.screenshot({ path: path.join(artifacts, "playground-run.png") });
  });

  await check("Stop waiting leaves a job that never finishes", async () => {
    await replaceProgram(q, ADD + "// hang\n");
    await q.click("#run");
    await q.waitForSelector(".stages .stage.now");
    await q.click("#stop-waiting");
    const msg = await q.locator("#run-error").textContent();
    assert(/^Stopped waiting for job job\d+/.test(msg), `message: ${msg}`);
    assert(await q.locator("#run").isEnabled(), "Run is available again");
  });

  await check("settings: a runner URL and token are used for the requests", async () => {
    await q.click("#settings");
    await q.fill("#runner-url", base);
    await q.fill("#runner-token", "secret-token");
    fake.auth.length = 0;
    await q.click("#settings-save");
    await q.waitForFunction(() => document.querySelector("#settings-dialog").textContent.includes("Reachable: runner fake"));
    assert(fake.auth.includes("Bearer secret-token"), `headers: ${fake.auth}`);
    await q.keyboard.press("Escape");
  });

  await check("a short link (Ctrl+S) restores the state in a new page", async () => {
    await replaceProgram(q, ADD.replace("// Example 1", "// short link test"));
    await q.keyboard.press("Control+S"); // at once: the edit is still in the debounce
    await q.waitForFunction(() => document.querySelector("#toast").textContent.includes("hort link"));
    const toast = await q.locator("#toast").textContent();
    const url = toast.match(/(http\S+#s:\S+)/)?.[1];
    assert(url && toast.startsWith("Short link copied"), `toast: ${toast}`);
    const p3 = await open(browser, url);
    await p3.waitForFunction(() => document.querySelector(".editor .cm-content").textContent.includes("short link test"));
    assert((await p3.inputValue('input[data-size="M"]')) === "1000", "sizes restored");
    await p3.close();
  });
  await q.close();

  await check("no console errors", async () => {
    assert(errors.length === 0, errors.join("\n"));
  });
} finally {
  await browser.close();
  server.close();
  server.closeAllConnections?.();
}

console.log(`${passed} passed, ${failed} failed`);
process.exit(failed ? 1 : 0);
