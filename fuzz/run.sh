#!/usr/bin/env bash
# Runs each fuzz target for SECONDS_PER_TARGET (default 600) with its seed
# corpus and dictionary; crashes land in artifacts/<target>/.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")"
secs="${SECONDS_PER_TARGET:-600}"
for t in ${TARGETS:-quantity documents intake_body}; do
  mkdir -p "corpus/$t" "artifacts/$t"
  dict=()
  [ "$t" != quantity ] && dict=(-dict=documents.dict)
  cargo +nightly fuzz run -O "$t" "corpus/$t" -- \
    -max_total_time="$secs" -timeout=60 -rss_limit_mb=3072 -max_len=16384 \
    -artifact_prefix="artifacts/$t/" -print_final_stats=1 "${dict[@]}"
done
