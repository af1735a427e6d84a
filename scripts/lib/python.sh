# shellcheck shell=bash
# DMTF's Python Redfish library, the independent client that checks the rack
# simulator (services/rack-sim/tests/independent_client.rs), and DMTF's
# Redfish Service and Protocol Validators (services/rack-sim/tests/
# dmtf_service_validator.rs, scripts/redfish-validators). Source it, then
# call `ensure_python_redfish` / `ensure_python_validators`.
#
# ensure_python_redfish makes `import redfish` work from one directory and
# exports its absolute path as FLOW_PY_REDFISH_PATH (the test puts it on
# PYTHONPATH). Looked for in this order:
#   1. FLOW_PY_REDFISH_PATH already set (an error if redfish does not import
#      from it);
#   2. PyPI's redfish==$FLOW_PY_REDFISH_VERSION (with its dependencies),
#      installed with `python3 -m pip install --target` under
#      <repo>/.tools/pip/ (reused on later runs).

# shellcheck source=scripts/lib/common.sh
source "$(dirname "${BASH_SOURCE[0]}")/common.sh"

FLOW_PY_REDFISH_VERSION="3.4.2"
FLOW_PY_SERVICE_VALIDATOR_VERSION="3.1.8"
FLOW_PY_PROTOCOL_VALIDATOR_VERSION="1.3.2"
FLOW_PY_NATS_VERSION="2.16.0"

# Prints the installed redfish version importable from directory $1; fails if none.
_flow_py_redfish_version() {
    PYTHONPATH="$1" PYTHONNOUSERSITE=1 python3 - <<'PY' 2>/dev/null
import importlib.metadata
import redfish  # noqa: F401  (must import, not only be listed)
print(importlib.metadata.version("redfish"))
PY
}

_flow_py_pip() {
    if ! python3 -m pip --version >/dev/null 2>&1; then
        flow_log "python: python3 -m pip missing; installing Debian's python3-pip (apt-get)"
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3-pip >&2
    fi
    PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_INPUT=1 PIP_ROOT_USER_ACTION=ignore \
        python3 -m pip "$@"
}

# Installs Debian's python3 when there is none.
_flow_py_need_python3() {
    if ! command -v python3 >/dev/null 2>&1; then
        flow_log "python: python3 missing; installing Debian's python3 (apt-get)"
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get update -q >&2
        flow_as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q python3 >&2
    fi
}

# Installs the pip requirements $2… into directory $1 (`pip install
# --target`), through a staging directory swapped in only once the install
# has finished, so an interrupted run leaves nothing half-made.
_flow_py_install_into() {
    local target="$1" staging
    shift
    staging="$target.partial.$$"
    rm -rf "$staging"
    mkdir -p "$(dirname "$target")"
    if ! _flow_py_pip install --quiet --target "$staging" "$@" >&2; then
        rm -rf "$staging"
        return 1
    fi
    rm -rf "$target"
    mv "$staging" "$target"
}

ensure_python_redfish() {
    local ver

    _flow_py_need_python3

    if [[ -n "${FLOW_PY_REDFISH_PATH:-}" ]]; then
        if ! ver="$(_flow_py_redfish_version "$FLOW_PY_REDFISH_PATH")"; then
            flow_die "python: FLOW_PY_REDFISH_PATH=$FLOW_PY_REDFISH_PATH does not provide an importable redfish (unset it to let scripts/test install one)"
            return 1
        fi
        flow_log "python: using redfish $ver from FLOW_PY_REDFISH_PATH ($FLOW_PY_REDFISH_PATH)"
        export FLOW_PY_REDFISH_PATH
        return 0
    fi

    local target="$FLOW_REPO_ROOT/.tools/pip/redfish-$FLOW_PY_REDFISH_VERSION"
    ver="$(_flow_py_redfish_version "$target" || true)"
    if [[ "$ver" != "$FLOW_PY_REDFISH_VERSION" ]]; then
        flow_log "python: installing redfish==$FLOW_PY_REDFISH_VERSION from PyPI into ${target#"$FLOW_REPO_ROOT"/}"
        if ! _flow_py_install_into "$target" "redfish==$FLOW_PY_REDFISH_VERSION"; then
            flow_die "python: pip install redfish==$FLOW_PY_REDFISH_VERSION failed"
            return 1
        fi
        if ! ver="$(_flow_py_redfish_version "$target")"; then
            flow_die "python: redfish does not import from $target after pip install"
            return 1
        fi
    fi

    flow_log "python: using redfish $ver ($target)"
    export FLOW_PY_REDFISH_PATH="$target"
}

# ensure_python_validators makes DMTF's redfish-service-validator and
# redfish-protocol-validator (pinned above, with their dependencies) importable
# from one directory, whose bin/rf_service_validator runs the service validator
# (`python3 <dir>/bin/rf_service_validator`; the protocol validator runs as
# `python3 -m redfish_protocol_validator.console_scripts`), and exports its
# absolute path as FLOW_PY_VALIDATORS_PATH. Looked for in this order:
#   1. FLOW_PY_VALIDATORS_PATH already set (an error if the validators do not
#      import from it);
#   2. PyPI's pinned versions, installed with `python3 -m pip install --target`
#      under <repo>/.tools/pip/ (reused on later runs).

# Prints "<service validator version> <protocol validator version>" importable
# from directory $1; fails if either is missing or bin/rf_service_validator is.
_flow_py_validators_version() {
    [[ -f "$1/bin/rf_service_validator" ]] || return 1
    PYTHONPATH="$1" PYTHONNOUSERSITE=1 python3 - <<'PY' 2>/dev/null
import importlib.metadata
import redfish_protocol_validator.console_scripts  # noqa: F401
import redfish_service_validator.console_scripts  # noqa: F401
print(importlib.metadata.version("redfish-service-validator"),
      importlib.metadata.version("redfish-protocol-validator"))
PY
}

ensure_python_validators() {
    local ver want
    want="$FLOW_PY_SERVICE_VALIDATOR_VERSION $FLOW_PY_PROTOCOL_VALIDATOR_VERSION"

    _flow_py_need_python3

    if [[ -n "${FLOW_PY_VALIDATORS_PATH:-}" ]]; then
        if ! ver="$(_flow_py_validators_version "$FLOW_PY_VALIDATORS_PATH")"; then
            flow_die "python: FLOW_PY_VALIDATORS_PATH=$FLOW_PY_VALIDATORS_PATH does not provide the DMTF validators with bin/rf_service_validator (unset it to let scripts/test install them)"
            return 1
        fi
        flow_log "python: using redfish-service-validator and redfish-protocol-validator ($ver) from FLOW_PY_VALIDATORS_PATH ($FLOW_PY_VALIDATORS_PATH)"
        export FLOW_PY_VALIDATORS_PATH
        return 0
    fi

    local target="$FLOW_REPO_ROOT/.tools/pip/validators-rsv-$FLOW_PY_SERVICE_VALIDATOR_VERSION-rpv-$FLOW_PY_PROTOCOL_VALIDATOR_VERSION"
    ver="$(_flow_py_validators_version "$target" || true)"
    if [[ "$ver" != "$want" ]]; then
        flow_log "python: installing redfish-service-validator==$FLOW_PY_SERVICE_VALIDATOR_VERSION and redfish-protocol-validator==$FLOW_PY_PROTOCOL_VALIDATOR_VERSION from PyPI into ${target#"$FLOW_REPO_ROOT"/}"
        if ! _flow_py_install_into "$target" \
            "redfish-service-validator==$FLOW_PY_SERVICE_VALIDATOR_VERSION" \
            "redfish-protocol-validator==$FLOW_PY_PROTOCOL_VALIDATOR_VERSION"; then
            flow_die "python: pip install of the DMTF validators failed"
            return 1
        fi
        if ! ver="$(_flow_py_validators_version "$target")" || [[ "$ver" != "$want" ]]; then
            flow_die "python: the DMTF validators ($want) do not import from $target after pip install (found: ${ver:-none})"
            return 1
        fi
    fi

    flow_log "python: using redfish-service-validator $FLOW_PY_SERVICE_VALIDATOR_VERSION and redfish-protocol-validator $FLOW_PY_PROTOCOL_VALIDATOR_VERSION ($target)"
    export FLOW_PY_VALIDATORS_PATH="$target"
}

# ensure_python_nats makes PyPI's nats-py (pinned above; a NATS client that
# is not Flow's) importable from one directory and exports its absolute path
# as FLOW_PY_NATS_PATH, for the Python client example
# (examples/python/submit_and_follow.py,
# services/scheduler/tests/python_client.rs).
ensure_python_nats() {
    _flow_py_need_python3
    local target="$FLOW_REPO_ROOT/.tools/pip/nats-py-$FLOW_PY_NATS_VERSION"
    if ! PYTHONPATH="$target" PYTHONNOUSERSITE=1 python3 -c 'import nats' 2>/dev/null; then
        flow_log "python: installing nats-py==$FLOW_PY_NATS_VERSION from PyPI into ${target#"$FLOW_REPO_ROOT"/}"
        _flow_py_install_into "$target" "nats-py==$FLOW_PY_NATS_VERSION" ||
            flow_die "python: pip install nats-py==$FLOW_PY_NATS_VERSION failed"
        PYTHONPATH="$target" PYTHONNOUSERSITE=1 python3 -c 'import nats' ||
            flow_die "python: nats does not import from $target after pip install"
    fi
    flow_log "python: using nats-py $FLOW_PY_NATS_VERSION ($target)"
    export FLOW_PY_NATS_PATH="$target"
}
