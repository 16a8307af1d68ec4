// Writes a brotli (quality 11) and a gzip (level 9) copy next to every file of a directory
// (x.js -> x.js.br, x.js.gz), for `hopfuse serve` to send precompressed (runner/src/static_files.rs).
// A file whose copies are newer than it is skipped, and copies whose file is gone are removed,
// so a rebuild recompresses only what changed. Then prints what a cold load of the page
// transfers with brotli: the wasm, the JavaScript and the stylesheet, each and in total.
//
// Usage: node web/precompress.mjs DIR [--json]   (--json: the sizes as JSON on stdout)
import fs from "node:fs";
import path from "node:path";
import zlib from "node:zlib";

const dir = process.argv[2];
if (!dir) {
  console.error("usage: node web/precompress.mjs DIR [--json]");
  process.exit(2);
}
const COPIES = [".br", ".gz"];
const isCopy = (name) => COPIES.some((c) => name.endsWith(c));
const compress = {
  ".br": (data) =>
    zlib.brotliCompressSync(data, {
      params: {
        [zlib.constants.BROTLI_PARAM_QUALITY]: 11,
        [zlib.constants.BROTLI_PARAM_SIZE_HINT]: data.length,
      },
    }),
  ".gz": (data) => zlib.gzipSync(data, { level: 9 }),
};

let written = 0;
for (const name of fs.readdirSync(dir)) {
  const file = path.join(dir, name);
  if (name.startsWith(".") || !fs.statSync(file).isFile()) continue;
  if (isCopy(name)) {
    if (!fs.existsSync(file.slice(0, file.lastIndexOf(".")))) fs.rmSync(file);
    continue;
  }
  const mtime = fs.statSync(file).mtimeMs;
  let data = null;
  for (const ext of COPIES) {
    const copy = file + ext;
    if (fs.existsSync(copy) && fs.statSync(copy).mtimeMs >= mtime) continue;
    data ??= fs.readFileSync(file);
    fs.writeFileSync(copy, compress[ext](data));
    written++;
  }
}

// What a cold load transfers: the files the page loads, as brotli.
const sizes = {};
for (const name of fs.readdirSync(dir)) {
  if (/\.(wasm|js|css)$/.test(name)) sizes[name] = fs.statSync(path.join(dir, name + ".br")).size;
}
const total = Object.values(sizes).reduce((a, b) => a + b, 0);
if (process.argv.includes("--json")) {
  console.log(JSON.stringify({ files: sizes, total }));
} else {
  const kib = (n) => `${(n / 1024).toFixed(1)} KiB`;
  const each = Object.entries(sizes).map(([n, s]) => `${n} ${kib(s)}`).join(", ");
  console.error(`precompress: ${written} copies written; brotli: ${each}; total ${kib(total)}`);
}
