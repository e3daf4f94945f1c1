#!/usr/bin/env bash
# The main job: record docs/examples/planted_bug.c (a loop writes one element
# past an array, over the field after it) with every register and byte
# (--full-state, under Valgrind: no Intel PT hardware needed), then find the
# instruction that wrote the wrong value by running backwards in GDB with a
# watchpoint, and let stock LLDB 22 load the same recording and dump what the
# program executed last.
#
# Installs gcc, gdb, lldb-22 and valgrind when missing (Debian 12), and builds
# retrace (release) unless RETRACE_BIN_DIR names a folder holding `retrace`
# and `retrace-stub` already built.
set -euo pipefail
cd "$(dirname "$0")/../.."

missing=()
for package in gcc gdb lldb-22 valgrind; do
    dpkg-query -W -f='${Status}' "$package" 2>/dev/null | grep -q "install ok installed" || missing+=("$package")
done
if ((${#missing[@]})); then
    sudo=""
    [ "$(id -u)" = 0 ] || sudo="sudo"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}"
fi

bin="${RETRACE_BIN_DIR:-}"
if [ -z "$bin" ]; then
    cargo build --release -q --bin retrace --bin retrace-stub
    bin=target/release
fi
mkdir -p target/example
gcc -O0 -g -o target/example/planted_bug docs/examples/planted_bug.c
wrong=$(grep -n 'line:wrong' docs/examples/planted_bug.c | cut -d: -f1)

echo "== retrace record --full-state: the program prints a wrong limit"
"$bin/retrace" record --full-state --force -o target/example/run -- target/example/planted_bug

echo
echo "== Who wrote it? GDB on the replay: back to where it is printed, then back to its last write"
"$bin/retrace" replay --gdb target/example/run -- -nx -batch \
    -ex "break planted_bug.c:$wrong" -ex "reverse-continue" -ex "print settings.limit" \
    -ex "watch -l settings.limit" -ex "reverse-continue" -ex "backtrace"

echo
echo "== The same recording in stock LLDB 22: the last instructions the program executed"
lldb-22 -b -o "trace load target/example/run/trace.json" \
           -o "thread trace dump instructions -c 20" \
           -o "thread trace dump info"
