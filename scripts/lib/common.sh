# shellcheck shell=bash
# Shared helpers for the scripts under scripts/. Source it; do not run it.
#
# Provides:
#   FLOW_REPO_ROOT  absolute path of the repository root (exported)
#   flow_log MSG    print a short progress line to stderr
#   flow_die MSG    print an error to stderr and return 1 (callers run under set -e)
#   flow_as_root    run a command as root (directly, or through sudo)

if [[ -z "${FLOW_COMMON_SH_LOADED:-}" ]]; then
    FLOW_COMMON_SH_LOADED=1

    FLOW_REPO_ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd -P)"
    export FLOW_REPO_ROOT

    flow_log() {
        printf '[flow] %s\n' "$*" >&2
    }

    flow_die() {
        printf '[flow] error: %s\n' "$*" >&2
        return 1
    }

    flow_as_root() {
        if [[ "$(id -u)" -eq 0 ]]; then
            "$@"
        elif command -v sudo >/dev/null 2>&1; then
            sudo -n "$@"
        else
            flow_die "need root to run '$*' (not root and no sudo)"
        fi
    }
fi
