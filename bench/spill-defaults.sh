#!/usr/bin/env bash
# Issue 44's silent-reply and reset runs at the defaults: a go-redis client
# with ContextTimeoutEnabled and go-redis's own MaxRetries (3: -max-retries
# 0), the store's and the limiter's default timeouts, fresh worker
# processes for each run, with and without WithFallbackLocal, plain and
# batched; the commit before the change ($BEFORE_BIN) and after ($AFTER_BIN)
# taking turns, ROUNDS rounds, each with its own seed.
#
#   go build -o /tmp/spill-before ./cmd/llmrate-spill   # at the commit before
#   go build -o /tmp/spill-after ./cmd/llmrate-spill    # at this one
#   BEFORE_BIN=/tmp/spill-before AFTER_BIN=/tmp/spill-after ROUNDS=3 bash bench/spill-defaults.sh
set -euo pipefail
ROUNDS=${ROUNDS:-3}
ARGS=${ARGS:-"-scenarios silent,reset -modes plain,batch -max-retries 0 -duration 8s -n 3 -g 6 -think 20ms"}
echo "# $(date -u +%FT%TZ) go $(go env GOVERSION) GOMAXPROCS $(nproc); load: $(cut -d' ' -f1-3 /proc/loadavg)"
echo "# before: ${BEFORE_LABEL:-$BEFORE_BIN}; after: ${AFTER_LABEL:-$AFTER_BIN}; args: $ARGS"
for r in $(seq 1 "$ROUNDS"); do
	for fb in false true; do
		for side in before after; do
			bin=$BEFORE_BIN
			[ "$side" = after ] && bin=$AFTER_BIN
			echo "## round $r, $side, fallback $fb, seed $r; load: $(cut -d' ' -f1-3 /proc/loadavg)"
			# shellcheck disable=SC2086
			"$bin" $ARGS -fallback="$fb" -seed "$r" 2>&1 | grep -v '^$'
		done
	done
done
