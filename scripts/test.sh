#!/usr/bin/env bash
# Runs every test of mssql-cdc, installing missing prerequisites first (idempotent).
#
#   scripts/test.sh                 # everything
#   scripts/test.sh --test e2e pipeline::   # extra arguments go to `cargo test`
#
# While editing one crate, `cargo test --release -p mssql-cdc-sim` (or -core, -source) tests it
# alone; the lake and the end-to-end suites are best run through this script with `--test`,
# which keeps the workspace's feature set (a lone `-p mssql-cdc-lake` unifies features
# differently and rebuilds DataFusion).
#
# Caches live outside the clone, under ${MSSQL_CDC_CACHE:-~/.cache/mssql-cdc}: the cargo
# target directory (one profile, `release`, shared by tests, benchmarks and the binary) and
# the Python virtualenv of the independent checkers.
set -euo pipefail

cd "$(dirname "$0")/.."
cache="${MSSQL_CDC_CACHE:-$HOME/.cache/mssql-cdc}"
mkdir -p "$cache"
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$cache/target}"

# --- Debian packages: a C toolchain for librdkafka and SQLite, OpenSSL for TLS/SASL; the
# deployment checkers (docker-compose for the Compose file, promtool from prometheus); libltdl7
# for Microsoft's ODBC driver that mssql-python ships (the TLS suite's independent client). --
packages=(build-essential pkg-config libssl-dev zlib1g-dev python3 python3-venv docker-compose prometheus libltdl7)
missing=()
for package in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "ok installed" || missing+=("$package")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "installing Debian packages: ${missing[*]}"
  sudo_cmd=""
  [ "$(id -u)" -eq 0 ] || sudo_cmd="sudo"
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}"
fi

# --- Python independent checkers, in a virtualenv keyed by the requirements' hash. ----------
requirements="scripts/requirements-test.txt"
venv="$cache/venv"
stamp="$venv/.requirements-$(sha256sum "$requirements" | cut -c1-16)"
if [ ! -f "$stamp" ]; then
  echo "installing Python checkers into $venv"
  python3 -m venv "$venv" 2>/dev/null || { rm -rf "$venv"; python3 -m venv --without-pip "$venv"; }
  [ -x "$venv/bin/pip" ] || "$venv/bin/python" -m ensurepip --upgrade
  "$venv/bin/python" -m pip install --quiet --disable-pip-version-check -r "$requirements"
  rm -f "$venv"/.requirements-*
  touch "$stamp"
fi
export MSSQL_CDC_PYTHON="$venv/bin/python"

# --- Rust: one build of the release profile serves the tests and the binary. ---------------
command -v cargo >/dev/null || { echo "cargo not found: install Rust (rustup) first" >&2; exit 1; }
cargo --version
# The whole workspace, with the crash tests' fault points (never in a shipped build).
features=(--workspace --features mssql-cdc/fault-injection)
# Lints as the workspace declares them (no unsafe, no unwrap/expect outside tests, docs), as
# errors, checked during the build itself: our crates compile through clippy's driver (what
# `cargo clippy` does, with code generation), so the lints cost no second pass over the
# dependencies (a separate `cargo clippy` re-checked all of them: 4-5 minutes cold). Set
# MSSQL_CDC_CLIPPY=0 to build with plain rustc (our crates then rebuild once).
if [ "${MSSQL_CDC_CLIPPY:-1}" != "0" ]; then
  clippy_driver="$(dirname "$(rustup which cargo 2>/dev/null || command -v cargo)")/clippy-driver"
  [ -x "$clippy_driver" ] || clippy_driver="$(command -v clippy-driver || true)"
  if [ -z "$clippy_driver" ] && command -v rustup >/dev/null; then
    rustup component add clippy && clippy_driver="$(dirname "$(rustup which cargo)")/clippy-driver"
  fi
  [ -x "$clippy_driver" ] || { echo "clippy-driver not found: rustup component add clippy" >&2; exit 1; }
  export RUSTC_WORKSPACE_WRAPPER="$clippy_driver"
  export CLIPPY_ARGS="-D__CLIPPY_HACKERY__warnings__CLIPPY_HACKERY__"
fi
# MSSQL_CDC_TIMINGS=1 writes cargo's build-timings report (cargo-timings/ under the target dir).
timings=()
[ "${MSSQL_CDC_TIMINGS:-0}" = "0" ] || timings=(--timings)
cargo build --release --locked --all-targets "${timings[@]}" "${features[@]}"
# Three tests at a time on CI's 2 cores: the end-to-end tests spend most of their time waiting on
# processes and poll intervals (ADR 0008). RUST_TEST_THREADS overrides it.
export RUST_TEST_THREADS="${RUST_TEST_THREADS:-3}"
cargo test --release --locked "${features[@]}" "$@"
