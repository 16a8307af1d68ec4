#!/usr/bin/env bash
# The playground's checks: clippy for wasm32, the crate's unit tests (native), the dist/ build,
# the gzipped-wasm size budget, and the end-to-end test in headless Chromium (web/tests/e2e.mjs,
# which starts and stops its own `target/release/hopfuse serve --fake-worker` on a free port with
# a temporary database; screenshots go to target/web-artifacts/).
set -euo pipefail
cd "$(dirname "$0")/.."
BUDGET=$((416 * 1024)) # bytes of gzipped wasm, compiler included (the PyTorch pane: +16 KiB)

bash scripts/setup-web.sh
cargo clippy -p hopfuse-web --target wasm32-unknown-unknown -- -D warnings
cargo test -p hopfuse-web --lib
bash scripts/build-web.sh
gz=$(gzip -9 -c dist/hopfuse_web_bg.wasm | wc -c)
echo "test-web: gzipped wasm: $gz bytes ($((gz / 1024)) KiB; budget $((BUDGET / 1024)) KiB)"
if [ "$gz" -gt "$BUDGET" ]; then
  echo "test-web: FAIL: the gzipped wasm is over the budget" >&2
  exit 1
fi
cargo build --release -p hopfuse-runner # the service the browser test runs against
node web/tests/e2e.mjs dist target/web-artifacts
