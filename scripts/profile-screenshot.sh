#!/usr/bin/env bash
# Turns what scripts/profile-device-check.sh recorded on the H100 into the docs: the profiled
# service run and its /api/health go to docs/recordings/, ncu's raw page of tma/exp_2d to the
# runner's ncu fixtures (where the parse test reads every page kept), and the playground
# replaying that run with its profile is rendered to docs/playground-profile-h100.png (here:
# the GPU machine has no browser). Nothing in the recording is edited.
# Usage: scripts/profile-screenshot.sh DIR   (DIR: the device check's $OUT, fetched here)
# Needs target/release/hopfuse and dist/ (scripts/build-web.sh) and Debian's chromium.
set -euo pipefail
cd "$(dirname "$0")/.."
dir=${1:?usage: scripts/profile-screenshot.sh DIR (the files of scripts/profile-device-check.sh)}
for f in exp_2d_profile_h100.sse health-profile.json ncu-raw-exp_2d.csv; do
  [ -s "$dir/$f" ] || { echo "profile-screenshot: $dir/$f is missing or empty" >&2; exit 1; }
done
grep -q '"profile":{"measured":' "$dir/exp_2d_profile_h100.sse" ||
  { echo "profile-screenshot: the recorded run has no measured profile" >&2; exit 1; }
cp "$dir/exp_2d_profile_h100.sse" docs/recordings/exp_2d_profile_h100.sse
cp "$dir/health-profile.json" docs/recordings/h100_health_profile.json
cp "$dir/ncu-raw-exp_2d.csv" runner/tests/fixtures/ncu/exp_2d_8192_h100.csv
for name in exp_store matmul; do
  [ -s "$dir/ncu-raw-$name.csv" ] && cp "$dir/ncu-raw-$name.csv" "runner/tests/fixtures/ncu/${name}_h100.csv"
done
# The recorded raw pages must read (every metric of the issue, warp stalls included).
cargo test -p hopfuse-runner --lib profile::tests::every_kept_raw_page_gives_the_issues_metrics
node web/tests/screenshot.mjs docs/recordings/exp_2d_profile_h100.sse \
  docs/recordings/h100_health_profile.json docs/playground-profile-h100.png dist --profile
