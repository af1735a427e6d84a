# shellcheck shell=bash
# A headless browser for the console's browser tests
# (services/console/tests/browser.rs). Source it, then call
# `ensure_chromium`: exports FLOW_CHROMIUM, the browser binary. Looked for in
# this order:
#   1. FLOW_CHROMIUM already set (an error if it does not run);
#   2. `chromium` (or `chromium-browser`) on the PATH;
#   3. Debian's `chromium` package, installed with apt-get.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# Prints the version of browser $1; fails if it does not run.
_flow_chromium_version() {
    "$1" --version 2>/dev/null | head -n 1 | grep -i chrom
}

ensure_chromium() {
    if [[ -n "${FLOW_CHROMIUM:-}" ]]; then
        _flow_chromium_version "$FLOW_CHROMIUM" >/dev/null ||
            flow_die "chromium: FLOW_CHROMIUM=$FLOW_CHROMIUM does not run (--version)"
        export FLOW_CHROMIUM
        return
    fi
    local found=""
    found="$(command -v chromium || command -v chromium-browser || true)"
    if [[ -z "$found" ]]; then
        flow_log "chromium: not installed; installing Debian's chromium (apt-get)"
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium >&2
        found="$(command -v chromium || true)"
        [[ -n "$found" ]] || flow_die "chromium: apt-get install chromium finished but no chromium is on the PATH"
    fi
    _flow_chromium_version "$found" >/dev/null || flow_die "chromium: $found does not run (--version)"
    export FLOW_CHROMIUM="$found"
}
