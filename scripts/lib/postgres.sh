# shellcheck shell=bash
# PostgreSQL for the test suite. Source it, then call `ensure_postgres`.
#
# ensure_postgres:
#   * FLOW_TEST_DATABASE_URL already set: trusted as is, nothing is done.
#   * A server answers `pg_isready` on 127.0.0.1:5432: nothing is done.
#   * Otherwise: installs Debian's `postgresql` if no server binaries exist,
#     creates/starts the newest cluster under /etc/postgresql, lets every
#     user in over 127.0.0.1 without a password (a `trust` line at the top of
#     pg_hba.conf), and waits (bounded) until it accepts connections.
#   Then exports FLOW_TEST_DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres.

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FLOW_PG_HOST="127.0.0.1"
FLOW_PG_PORT="5432"
FLOW_PG_CLUSTER="main"
FLOW_PG_DEFAULT_URL="postgres://postgres@${FLOW_PG_HOST}:${FLOW_PG_PORT}/postgres"
FLOW_PG_HBA_LINE="host all all ${FLOW_PG_HOST}/32 trust"

_flow_pg_ready() {
    command -v pg_isready >/dev/null 2>&1 &&
        pg_isready -q -h "$FLOW_PG_HOST" -p "$FLOW_PG_PORT" -t 2
}

_flow_pg_server_installed() {
    compgen -G '/usr/lib/postgresql/*/bin/postgres' >/dev/null &&
        command -v pg_ctlcluster >/dev/null 2>&1 &&
        command -v pg_isready >/dev/null 2>&1
}

# Newest version that has a configured cluster directory, e.g. "15"; empty if none.
_flow_pg_cluster_version() {
    local dir
    dir="$(compgen -G "/etc/postgresql/*/${FLOW_PG_CLUSTER}" | sort -V | tail -n 1 || true)"
    if [[ -n "$dir" ]]; then
        basename "$(dirname "$dir")"
    fi
}

# Newest installed server version, e.g. "15"; empty if none.
_flow_pg_installed_version() {
    local bin
    bin="$(compgen -G '/usr/lib/postgresql/*/bin/postgres' | sort -V | tail -n 1 || true)"
    if [[ -n "$bin" ]]; then
        basename "$(dirname "$(dirname "$bin")")"
    fi
}

_flow_pg_install() {
    flow_log "postgres: server not installed; installing Debian's postgresql (apt-get)"
    flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
    flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q \
        -o Dpkg::Options::=--force-confdef -o Dpkg::Options::=--force-confold \
        postgresql >&2
    _flow_pg_server_installed ||
        flow_die "postgres: apt-get install postgresql finished but no server binaries were found under /usr/lib/postgresql"
}

_flow_pg_trust_loopback() {
    local hba="$1"
    [[ -f "$hba" ]] || flow_die "postgres: $hba not found"
    if ! grep -qxF "$FLOW_PG_HBA_LINE" "$hba"; then
        flow_log "postgres: adding '$FLOW_PG_HBA_LINE' at the top of $hba"
        # GNU sed -i keeps the file's owner and mode when run as root.
        flow_as_root sed -i "1i ${FLOW_PG_HBA_LINE}" "$hba"
    fi
}

_flow_pg_wait_ready() {
    local timeout_secs="${FLOW_PG_READY_TIMEOUT_SECS:-30}" waited=0
    until _flow_pg_ready; do
        if ((waited >= timeout_secs)); then
            flow_die "postgres: not ready on ${FLOW_PG_HOST}:${FLOW_PG_PORT} after ${timeout_secs}s (see /var/log/postgresql/)"
            return 1
        fi
        sleep 1
        waited=$((waited + 1))
    done
}

ensure_postgres() {
    if [[ -n "${FLOW_TEST_DATABASE_URL:-}" ]]; then
        flow_log "postgres: using FLOW_TEST_DATABASE_URL from the environment"
        export FLOW_TEST_DATABASE_URL
        return 0
    fi

    if _flow_pg_ready; then
        flow_log "postgres: already running on ${FLOW_PG_HOST}:${FLOW_PG_PORT}"
    else
        if ! _flow_pg_server_installed; then
            _flow_pg_install
        fi

        local ver
        ver="$(_flow_pg_cluster_version)"
        if [[ -z "$ver" ]]; then
            ver="$(_flow_pg_installed_version)"
            [[ -n "$ver" ]] || flow_die "postgres: no server version found under /usr/lib/postgresql"
            flow_log "postgres: creating cluster ${ver}/${FLOW_PG_CLUSTER}"
            flow_as_root pg_createcluster "$ver" "$FLOW_PG_CLUSTER" >&2
        fi

        _flow_pg_trust_loopback "/etc/postgresql/${ver}/${FLOW_PG_CLUSTER}/pg_hba.conf"

        if flow_as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$FLOW_PG_CLUSTER" status >/dev/null 2>&1; then
            flow_log "postgres: cluster ${ver}/${FLOW_PG_CLUSTER} running; reloading its config"
            flow_as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$FLOW_PG_CLUSTER" reload >&2
        else
            flow_log "postgres: starting cluster ${ver}/${FLOW_PG_CLUSTER}"
            flow_as_root pg_ctlcluster --skip-systemctl-redirect "$ver" "$FLOW_PG_CLUSTER" start >&2
        fi

        _flow_pg_wait_ready

        if command -v psql >/dev/null 2>&1; then
            PGCONNECT_TIMEOUT=5 psql -w -X -q -h "$FLOW_PG_HOST" -p "$FLOW_PG_PORT" \
                -U postgres -d postgres -tAc 'select 1' >/dev/null ||
                flow_die "postgres: ready, but user postgres cannot log in over ${FLOW_PG_HOST} without a password (check $FLOW_PG_HBA_LINE in pg_hba.conf)"
        fi
        flow_log "postgres: ready on ${FLOW_PG_HOST}:${FLOW_PG_PORT}"
    fi

    export FLOW_TEST_DATABASE_URL="$FLOW_PG_DEFAULT_URL"
}
