#!/usr/bin/env bash
# test_browser.sh - the dashboard in headless Chromium (tests/browser/):
# installs playwright-core from package-lock.json into
# tests/browser/node_modules when missing, then runs dashboard.test.js
# against this build's `due`.  The screenshots land in ${TMPDIR:-/tmp}.
#
# Without node/npm or Chromium (Debian packages nodejs and chromium, see
# scripts/deps) the test is skipped on a developer's machine and FAILS
# under CI=true.
. "$(dirname "$0")/lib.sh"
B=$(cd "$(dirname "$0")/../browser" && pwd)
CHROMIUM=${CHROMIUM:-/usr/bin/chromium}

missing=()
command -v node >/dev/null || missing+=(node)
command -v npm >/dev/null || missing+=(npm)
[ -x "$CHROMIUM" ] || missing+=("$CHROMIUM")
if [ ${#missing[@]} -gt 0 ]; then
	if [ "${CI:-}" = true ]; then
		bad "missing ${missing[*]} (install: scripts/deps)"
		finish
	fi
	echo "skipped: missing ${missing[*]} (install: scripts/deps)"
	echo "0 passed, 0 failed, 1 skipped"
	exit 0
fi

# One install at a time (ctest runs tests in parallel; two builds may too).
install() {
	[ -f "$B/node_modules/playwright-core/package.json" ] &&
		[ "$B/node_modules/.package-lock.json" -nt "$B/package-lock.json" ] && return 0
	(cd "$B" && npm ci --no-audit --no-fund --loglevel=error)
}
if ! (flock 9 && install) 9>"${TMPDIR:-/tmp}/due-browser-npm.lock" >"$T/npm.log" 2>&1; then
	bad "npm ci in tests/browser failed: $(tail -5 "$T/npm.log")"
	finish
fi

rc=0
DUE_BIN="$DUE" CHROMIUM="$CHROMIUM" timeout 300 node "$B/dashboard.test.js" || rc=$?
expect_eq "dashboard.test.js" 0 "$rc"
finish
