#!/usr/bin/env bash
# Runs every retrace test. Installs the system packages the tests need
# (Debian 12) when they are missing. Usage: bash tests/run.sh
set -euo pipefail
cd "$(dirname "$0")/.."
# The time it all took, printed at the end (also when something fails).
trap 'status=$?; echo "tests/run.sh: exit status $status after $((SECONDS / 60)) min $((SECONDS % 60)) s"' EXIT

# Tools the tests use as independent references.
packages=(libipt-dev lldb-22 python3-lldb-22 gdb gcc clang-22 llvm-22 libclang-rt-22-dev nodejs python3-venv valgrind strace)
missing=()
for package in "${packages[@]}"; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
# npm (the VS Code extension's tests and .vsix): Debian's package, unless
# the installed Node.js brings its own.
command -v npm >/dev/null || missing+=(npm)
if ((${#missing[@]})); then
    echo "installing: ${missing[*]}"
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

# wasmtime (from PyPI) writes the third kind of real jitdump the tests read.
venv=target/wasmtime-venv
if ! "$venv/bin/python" -c "import wasmtime" 2>/dev/null; then
    echo "installing wasmtime (PyPI) into $venv"
    python3 -m venv "$venv"
    "$venv/bin/pip" install -q "wasmtime==50.0.1"
fi
export RETRACE_WASMTIME_PYTHON="$PWD/$venv/bin/python"

# brotli 1.2.1's sources (PyPI's sdist): a real program the shim's reverse
# stepping is judged on against GDB. (The venv's pip: Debian's python3 has
# none without python3-pip.)
brotli=target/brotli-1.2.1.tar.gz
if [ ! -s "$brotli" ]; then
    echo "downloading brotli 1.2.1's sources (PyPI) into target/"
    mkdir -p target/brotli-download
    "$venv/bin/pip" download -q --no-binary :all: --no-deps -d target/brotli-download "Brotli==1.2.1"
    mv target/brotli-download/[Bb]rotli-1.2.1.tar.gz "$brotli"
fi
export RETRACE_BROTLI_SDIST="$PWD/$brotli"

# lz4 4.4.5's sources (PyPI's sdist): its C library compressing a buffer is
# one of the programs the full-state differential test replays.
lz4=target/lz4-4.4.5.tar.gz
if [ ! -s "$lz4" ]; then
    echo "downloading lz4 4.4.5's sources (PyPI) into target/"
    mkdir -p target/lz4-download
    "$venv/bin/pip" download -q --no-binary :all: --no-deps -d target/lz4-download "lz4==4.4.5"
    mv target/lz4-download/lz4-4.4.5.tar.gz "$lz4"
fi
export RETRACE_LZ4_SDIST="$PWD/$lz4"

# Under CI=true a test whose tool is missing fails instead of skipping.
export CI="${CI:-false}"
# One build of the whole workspace, with the features every package's
# tests ask for: the binaries, the tests and the shim's Python module
# (retrace-python, no test of its own). The tests that run retrace-stub or
# load the module take them as built (RETRACE_WORKSPACE_BUILT=1) instead of
# building each alone, with other features (80 s and 60 s of the suite).
cargo build --workspace --lib --bins --tests --locked
export RETRACE_WORKSPACE_BUILT=1
# (--no-fail-fast: every failing test binary is reported, not the first.)
status=0
cargo test --workspace --locked --no-fail-fast || status=$?
# Every cargo-fuzz target, 30 s each on its corpus, all at once, built
# without optimization (the build is most of it): a target that no longer
# builds, or an input that fails one, fails the run. (The long runs:
# docs/fuzzing.md.)
RETRACE_FUZZ_BUILD=dev RETRACE_FUZZ_JOBS=16 bash tests/fuzz.sh 30 || status=1
exit $status
