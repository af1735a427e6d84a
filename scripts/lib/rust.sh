# shellcheck shell=bash
# The Rust toolchain for the scripts. Source it, then call `ensure_rust`.
#
# ensure_rust checks that cargo and rustc are there and at least the
# workspace's rust-version (Cargo.toml), with a message naming what to do,
# and makes `cargo nextest` available: the one on PATH if there is one,
# otherwise `cargo install --locked cargo-nextest` into <repo>/.tools/cargo
# (reused on later runs; its bin directory is put on PATH).

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

# The version the workspace needs, read from Cargo.toml's rust-version.
_flow_rust_needed() {
    sed -n 's/^rust-version *= *"\([0-9.]*\)".*/\1/p' "$FLOW_REPO_ROOT/Cargo.toml" | head -n 1
}

# Succeeds if version $1 (MAJOR.MINOR[.PATCH]) is at least $2.
_flow_version_at_least() {
    local have="$1" need="$2" h1 h2 n1 n2
    IFS=. read -r h1 h2 _ <<<"$have"
    IFS=. read -r n1 n2 _ <<<"$need"
    ((h1 > n1 || (h1 == n1 && h2 >= n2)))
}

ensure_rust() {
    local need have
    command -v cargo >/dev/null 2>&1 || flow_die "rust: cargo is not on PATH; install Rust with rustup (https://rustup.rs), then run this again"
    command -v rustc >/dev/null 2>&1 || flow_die "rust: rustc is not on PATH; install Rust with rustup"
    need="$(_flow_rust_needed)"
    have="$(rustc --version | sed -n 's/^rustc \([0-9][0-9.]*\).*/\1/p')"
    if [[ -n "$need" ]] && ! _flow_version_at_least "$have" "$need"; then
        flow_die "rust: rustc $have is older than the workspace's rust-version $need; run 'rustup update stable'"
    fi
    flow_log "rust: rustc $have (the workspace needs >= ${need:-?})"
    if cargo nextest --version >/dev/null 2>&1; then
        return 0
    fi
    local tools="$FLOW_REPO_ROOT/.tools/cargo"
    export PATH="$tools/bin:$PATH"
    if cargo nextest --version >/dev/null 2>&1; then
        flow_log "rust: using cargo-nextest from $tools/bin"
        return 0
    fi
    flow_log "rust: cargo-nextest missing; installing it into $tools (cargo install --locked, a few minutes)"
    cargo install --locked --root "$tools" cargo-nextest >&2 ||
        flow_die "rust: cannot install cargo-nextest (cargo install --locked cargo-nextest)"
    cargo nextest --version >/dev/null 2>&1 || flow_die "rust: cargo-nextest installed but 'cargo nextest' does not run"
}
