#!/usr/bin/env bash
# Builds the playground into dist/: the CodeMirror bundle (esbuild), the Leptos crate for
# wasm32 (profile wasm-release: size over speed), wasm-bindgen --target web, wasm-opt -Oz (npm
# binaryen), then index.html and the stylesheet. Prints the gzipped size of the wasm.
# Usage: scripts/build-web.sh   (run scripts/setup-web.sh once first)
set -euo pipefail
cd "$(dirname "$0")/.."

(cd web && npm run --silent bundle -- --log-level=warning)
cargo build -p hopfuse-web --target wasm32-unknown-unknown --profile wasm-release
rm -rf dist
mkdir -p dist
wasm-bindgen --target web --no-typescript --out-dir dist \
  target/wasm32-unknown-unknown/wasm-release/hopfuse_web.wasm
# --flatten --rereloop before -Oz, run to a fixed point: about 1% smaller gzipped than -Oz alone.
web/node_modules/.bin/wasm-opt --flatten --rereloop -Oz -Oz --converge \
  --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext \
  --enable-mutable-globals --enable-reference-types --enable-multivalue \
  dist/hopfuse_web_bg.wasm -o dist/hopfuse_web_bg.wasm
cp index.html web/style.css web/js/dist/editor.js dist/
wasm=$(wc -c <dist/hopfuse_web_bg.wasm)
gz=$(gzip -9 -c dist/hopfuse_web_bg.wasm | wc -c)
js=$(gzip -9 -c dist/editor.js | wc -c)
echo "build-web: dist/ ready: wasm $((wasm / 1024)) KiB ($((gz / 1024)) KiB gzipped), editor.js $((js / 1024)) KiB gzipped"
