#!/usr/bin/env bash
# The main job: build docs/examples/hello.c, record it with retrace's software
# recorder (no Intel PT hardware needed), and let stock LLDB 22 load the trace
# bundle and dump the last instructions the program executed.
set -euo pipefail
cd "$(dirname "$0")/../.."

if ! command -v lldb-22 >/dev/null || ! command -v gcc >/dev/null; then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq lldb-22 gcc
fi

cargo build --release -q --bin retrace
mkdir -p target/example
gcc -O1 -g -o target/example/hello docs/examples/hello.c
target/release/retrace record --mode branch --force -o target/example/bundle -- target/example/hello
lldb-22 -b -o "trace load target/example/bundle/trace.json" \
           -o "thread trace dump instructions -c 30" \
           -o "thread trace dump info"
