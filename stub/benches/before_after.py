"""Two builds of retrace-stub side by side in one run: the history moves a
debugger makes, timed against each build in turn (one server at a time,
the order alternating each round), as medians and the ratio after/before.

  python3 stub/benches/before_after.py BEFORE_STUB AFTER_STUB BUNDLE PROGRAM

- BUNDLE: a full-state recording's trace.json (`cargo bench -p retrace-stub
  --bench replay_full_state` leaves one in target/tmp/bench-replay-full-state);
  replayed with `--replay`: g, 24 p (as LLDB reads a stop), m, bs + g,
  s + g, bc to a breakpoint at `bench_mark`, c forwards.
- PROGRAM: tests/programs/bench_loop.c built static (the reverse_continue
  bench leaves it in target/tmp/bench-reverse-continue), recorded live by
  `--record=full` for 20,000 iterations (about 300,000 instructions): bc
  to bench_begin, c to bench_end, bc to the write of __environ (a
  watchpoint), bs + g, s + g.

Raw gdb-remote packets (no-ack mode), timed from the packet sent to its
reply.
"""
import re
import socket
import statistics
import subprocess
import sys
import time


class Server:
    def __init__(self, command, port):
        # (`--listen` goes before the program's `--`.)
        at = command.index("--") if "--" in command else len(command)
        command = command[:at] + ["--listen", f"127.0.0.1:{port}"] + command[at:]
        self.process = subprocess.Popen(command, stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        for _ in range(300):
            try:
                self.connection = socket.create_connection(("127.0.0.1", port))
                break
            except OSError:
                time.sleep(0.1)
        self.received = b""
        self.connection.sendall(b"+")
        self.ask("QStartNoAckMode")

    def ask(self, body):
        payload = body.encode()
        self.connection.sendall(b"$" + payload + b"#%02x" % (sum(payload) & 0xFF))
        while True:
            found = re.search(rb"\$([^#]*)#..", self.received)
            if found:
                self.received = self.received[found.end():]
                return found.group(1)
            self.received += self.connection.recv(65536)

    def timed(self, *bodies):
        started = time.perf_counter()
        for body in bodies:
            reply = self.ask(body)
        return time.perf_counter() - started, reply

    def end(self):
        self.process.kill()
        self.process.wait()


def symbol(program, name):
    for line in subprocess.check_output(["nm", program], text=True).splitlines():
        parts = line.split()
        if parts[-1] == name:
            return int(parts[0], 16)
    raise SystemExit(f"{program}: no symbol {name}")


def replay_moves(server, times, mark):
    server.ask("?")
    server.ask("Z0,%x,1" % mark)
    for _ in range(30):
        times["replay g"].append(server.timed("g")[0])
        times["replay 24 p"].append(server.timed(*["p%x" % n for n in range(24)])[0])
        times["replay m 8"].append(server.timed("m%x,8" % mark)[0])
        times["replay bs + g"].append(server.timed("bs", "g")[0])
        times["replay s + g"].append(server.timed("s", "g")[0])
        spent, reply = server.timed("bc")
        assert reply.startswith(b"T05"), reply
        times["replay bc to bench_mark"].append(spent)
        server.ask("z0,%x,1" % mark)
        server.ask("s")
        times["replay c forwards"].append(server.timed("c")[0])
        server.ask("Z0,%x,1" % mark)


def live_moves(server, times, begin, end, environ):
    stop = server.ask("?")
    thread = re.search(rb"thread:([0-9a-fp.]+);", stop).group(1).decode()
    server.ask("Hc" + thread)
    server.ask("Hg" + thread)
    server.ask("Z0,%x,1" % end)
    assert server.ask("vCont;c").startswith(b"T05")
    server.ask("z0,%x,1" % end)
    for _ in range(15):
        server.ask("Z0,%x,1" % begin)
        spent, reply = server.timed("bc")
        assert reply.startswith(b"T05"), reply
        times["live bc to bench_begin"].append(spent)
        server.ask("z0,%x,1" % begin)
        server.ask("Z0,%x,1" % end)
        times["live c to bench_end"].append(server.timed("vCont;c")[0])
        server.ask("z0,%x,1" % end)
        server.ask("Z2,%x,8" % environ)
        spent, reply = server.timed("bc")
        assert reply.startswith(b"T05"), reply
        times["live bc to the write of __environ"].append(spent)
        server.ask("z2,%x,8" % environ)
        server.ask("Z0,%x,1" % end)
        server.ask("vCont;c")
        server.ask("z0,%x,1" % end)
        times["live bs + g"].append(server.timed("bs", "g")[0])
        times["live s + g"].append(server.timed("s", "g")[0])


def main():
    before, after, bundle, program = sys.argv[1:5]
    stubs = {"before": before, "after": after}
    replayed = bundle.rsplit("/", 2)[0] + "/replay_bench"
    mark = symbol(replayed, "bench_mark")
    begin, end, environ = symbol(program, "bench_begin"), symbol(program, "bench_end"), symbol(program, "__environ")
    times = {name: {} for name in stubs}
    port = 47800
    for round_ in range(4):
        for name in (["before", "after"] if round_ % 2 == 0 else ["after", "before"]):
            series = times[name]
            for key in ("replay", "live"):
                port += 1
                if key == "replay":
                    server = Server([stubs[name], "--replay", bundle], port)
                    replay_moves(server, _defaulted(series), mark)
                elif round_ < 2:
                    server = Server([stubs[name], "--record=full", "--", program, "20000"], port)
                    live_moves(server, _defaulted(series), begin, end, environ)
                else:
                    continue
                server.end()
    print(f"{'':34} {'before':>10} {'after':>10}  after/before")
    for what in times["before"]:
        b = statistics.median(times["before"][what]) * 1e3
        a = statistics.median(times["after"][what]) * 1e3
        print(f"{what:34} {b:8.3f} ms {a:8.3f} ms  {a / b:.2f}")


class _defaulted(dict):
    """A series of samples per move, made on first use."""

    def __init__(self, into):
        super().__init__()
        self.into = into

    def __getitem__(self, key):
        return self.into.setdefault(key, [])


main()
