#!/usr/bin/env bash
# Runs every native Go fuzz target in the module for a short time each.
# Usage: scripts/fuzz.sh [DURATION]   (default 3s)
set -euo pipefail
cd "$(dirname "$0")/.."
t=${1:-3s}
fail=0
while IFS= read -r file; do
	dir=./$(dirname "$file")
	for fn in $(grep -oE '^func (Fuzz[A-Za-z0-9_]+)\(' "$file" | sed -E 's/^func (Fuzz[A-Za-z0-9_]+)\(/\1/'); do
		echo "== $dir $fn ($t)"
		if ! go test -run '^$' -fuzz "^${fn}\$" -fuzztime "$t" "$dir"; then
			fail=1
		fi
	done
done < <(git ls-files '*_test.go' | xargs grep -l '^func Fuzz' | sort)
exit $fail
