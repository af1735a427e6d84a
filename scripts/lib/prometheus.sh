# shellcheck shell=bash
# Prometheus and promtool for the alert-rule checks and the scrape test
# (services/worker/tests/prometheus.rs). Source it, then call
# `ensure_prometheus`: exports FLOW_PROMETHEUS and FLOW_PROMTOOL. Looked for
# in this order:
#   1. FLOW_PROMETHEUS / FLOW_PROMTOOL already set (an error if they do not run);
#   2. `prometheus` and `promtool` on the PATH;
#   3. Debian's `prometheus` package, installed with apt-get.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

ensure_prometheus() {
    local prometheus="${FLOW_PROMETHEUS:-$(command -v prometheus || true)}"
    local promtool="${FLOW_PROMTOOL:-$(command -v promtool || true)}"
    if [[ -z "$prometheus" || -z "$promtool" ]]; then
        flow_log "prometheus: not installed; installing Debian's prometheus (apt-get)"
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends prometheus >&2
        prometheus="$(command -v prometheus || true)"
        promtool="$(command -v promtool || true)"
    fi
    [[ -n "$prometheus" && -n "$promtool" ]] ||
        flow_die "prometheus: apt-get install prometheus finished but prometheus or promtool is not on the PATH"
    "$prometheus" --version >/dev/null 2>&1 || flow_die "prometheus: $prometheus does not run (--version)"
    "$promtool" --version >/dev/null 2>&1 || flow_die "prometheus: $promtool does not run (--version)"
    export FLOW_PROMETHEUS="$prometheus" FLOW_PROMTOOL="$promtool"
}
