#!/usr/bin/env bash
# Builds the playground into dist/, redoing only what changed: the CodeMirror bundle (esbuild),
# the Leptos crate for wasm32 (profile wasm-release: size over speed; cargo knows what changed),
# wasm-bindgen --target web and wasm-opt -Oz (npm binaryen), then the glue minified by esbuild,
# all skipped when the wasm they start from is the one they last made dist/ from
# (dist/.wasm-stamp), then index.html and the stylesheet (minified by esbuild), the example
# programs (dist/examples/, fetched when chosen), and a brotli (.br) and a gzip (.gz) copy of
# every top-level file for `hopfuse serve` (redone only for files newer than their copies). Prints what a cold load transfers (brotli).
# Usage: scripts/build-web.sh   (run scripts/setup-web.sh once first)
# A first build takes about 5 minutes on 4 cores (the compiler and Leptos for wasm32, with LTO),
# then about 1 minute after a change to Rust code and about 2 seconds with nothing changed.
set -euo pipefail
cd "$(dirname "$0")/.."
log() { echo "build-web: $*" >&2; }
SECONDS=0

# The CodeMirror bundle, when a source or the npm lock file is newer than it.
bundle=web/js/dist/editor.js
if [ ! -f "$bundle" ] || [ -n "$(find web/js -maxdepth 1 -name '*.js' -newer "$bundle")" ] ||
  [ web/package-lock.json -nt "$bundle" ]; then
  (cd web && npm run --silent bundle -- --log-level=warning)
fi
log "wasm32 build of the playground (cargo: a first build takes minutes)"
# erase_components: Leptos erases each component's view type (AnyView) instead of nesting it
# into its parent's, which cuts the monomorphized view code: about 26 KiB of brotli off the
# cold load, the page unchanged. For the playground's wasm only (clippy and tests keep theirs).
# --remap-path-prefix: the registry's absolute paths in panic locations (they depend on the
# machine's CARGO_HOME) become relative, so the wasm, and its size, are the same everywhere.
remap=""
for d in "${CARGO_HOME:-$HOME/.cargo}"/registry/src/*/; do
  [ -d "$d" ] && remap="$remap --remap-path-prefix=${d%/}="
done
CARGO_TARGET_WASM32_UNKNOWN_UNKNOWN_RUSTFLAGS="--cfg erase_components$remap" \
  cargo build -p hopfuse-web --target wasm32-unknown-unknown --profile wasm-release
mkdir -p dist

# wasm-bindgen and wasm-opt only for a wasm they have not processed yet: the stamp names the
# input's hash and both tools' versions and flags.
wasm_in=target/wasm32-unknown-unknown/wasm-release/hopfuse_web.wasm
# (--converge: -Oz again until nothing shrinks; about 1.6 KiB less brotli for 15 s more.
# --ignore-implicit-traps: optimise as if loads, stores and divisions never trap, which holds for
# Rust's code: it checks divisors and bounds itself (a panic is an explicit trap, kept) and
# converts floats without trapping; about 0.2 KiB less brotli.
# --merge-similar-functions: functions that differ only in constants become one taking them as
# parameters; --zero-filled-memory: the module's memory is its own, so it starts zeroed; with
# the two --strip flags, about 0.4 KiB less brotli.)
opt_flags=(-Oz --converge --ignore-implicit-traps --enable-bulk-memory --enable-nontrapping-float-to-int --enable-sign-ext
  --enable-mutable-globals --enable-reference-types --enable-multivalue
  --zero-filled-memory --strip-producers --strip-target-features --merge-similar-functions)
wasm_opt=web/node_modules/.bin/wasm-opt
# (binaryen's version from its package: `wasm-opt --version` starts node, which takes a while)
binaryen=$(grep -m1 '"version"' web/node_modules/binaryen/package.json | tr -dc '0-9.')
stamp="$(sha256sum "$wasm_in" | cut -d' ' -f1) $(wasm-bindgen --version) binaryen $binaryen ${opt_flags[*]} glue: esbuild --minify"
if [ -f dist/hopfuse_web_bg.wasm ] && [ -f dist/hopfuse_web.js ] &&
  [ "$(cat dist/.wasm-stamp 2>/dev/null)" = "$stamp" ]; then
  log "wasm unchanged: wasm-bindgen and wasm-opt skipped"
else
  t=$SECONDS
  log "wasm-bindgen, then wasm-opt -Oz (about 30 s)"
  rm -f dist/.wasm-stamp
  wasm-bindgen --target web --no-typescript --out-dir dist "$wasm_in"
  "$wasm_opt" "${opt_flags[@]}" dist/hopfuse_web_bg.wasm -o dist/hopfuse_web_bg.wasm
  # wasm-bindgen's glue minified (esbuild, no bundling: its exports and its imports of
  # ./editor.js stay as they are): 7.0 -> 5.4 KiB brotli.
  web/node_modules/.bin/esbuild dist/hopfuse_web.js --minify --format=esm --target=es2020 \
    --log-level=warning --allow-overwrite --outfile=dist/hopfuse_web.js
  echo "$stamp" >dist/.wasm-stamp
  log "wasm optimised in $((SECONDS - t)) s"
fi
# (web/reference.json: the language reference, fetched by the page when first needed;
# web/boot.js: the page's start, a file because the service's CSP allows no inline script.)
for f in index.html web/boot.js web/js/dist/editor.js web/reference.json; do
  cmp -s "$f" "dist/$(basename "$f")" || cp "$f" dist/
done
# The stylesheet minified by esbuild (4.0 -> 3.5 KiB brotli; replaced only when it differs, so
# its compressed copies are not redone needlessly).
web/node_modules/.bin/esbuild web/style.css --minify --log-level=warning --outfile=dist/.style.css
if cmp -s dist/.style.css dist/style.css; then rm dist/.style.css; else mv dist/.style.css dist/style.css; fi
# The example programs: the page carries only the menu and fetches a chosen example from
# dist/examples/<group>/<name>.hf (web/src/examples.rs).
rm -rf dist/examples
for g in examples/*/; do
  mkdir -p "dist/$g"
  cp "$g"*.hf "dist/$g"
done
node web/precompress.mjs dist
log "dist/ ready in ${SECONDS} s"
