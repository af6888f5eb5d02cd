#!/usr/bin/env bash
# Non-test Go lines per adapter, excluding the in-repo test brokers
# (directories named *test, embedded/ and internal/). Usage: scripts/lines.sh [adapter...]
set -euo pipefail
cd "$(dirname "$0")/.."
names=("$@")
[ ${#names[@]} -gt 0 ] || names=(activemq amqp kafka kafkaqueue mem mqtt pulsar redis rocketmq)
total=0
for a in "${names[@]}"; do
	n=$(find "adapters/$a" -name '*.go' ! -name '*_test.go' \
		! -path '*test/*' ! -path '*/embedded/*' ! -path '*/internal/*' -print0 |
		xargs -0 cat | wc -l)
	printf '%-9s %6d\n' "$a" "$n"
	total=$((total + n))
done
printf '%-9s %6d\n' total "$total"
for p in portable driver kit; do
	[ -d "adapters/$p" ] || continue
	printf '%-9s %6d\n' "$p" "$(find "adapters/$p" -name '*.go' ! -name '*_test.go' -print0 | xargs -0 cat | wc -l)"
done
printf '%-9s %6d\n' root "$(find adapters -maxdepth 1 -name '*.go' ! -name '*_test.go' -print0 | xargs -0 cat | wc -l)"
