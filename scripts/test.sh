#!/usr/bin/env bash
# The project's one test command: provisions the test peers if missing, then runs every test
# (unit tests, and integration tests against the built binary, promtool and a real Prometheus).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-test-peers.sh
# --no-fail-fast: one failing test binary must not hide what the others would say.
cargo test --locked --all-targets --no-fail-fast "$@"
