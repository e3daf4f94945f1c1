// Benchmark: a Step Back round trip through retrace-dap against a forward
// `next` round trip through plain lldb-dap-22, on the same program
// (tests/programs/step_back.c built with a long loop), in one run. A round trip is the request
// until the `stopped` event, then the top frame and its locals, as VS Code
// asks for them after every stop. Prints both medians and their ratio
// (target: at most 1.5).
//
//   cargo bench -p retrace-plugin --bench dap
"use strict";
const { PROGRAM, markedLine, client, start, stopAfter, place } = require("../test/common.js");

const ROUNDS = Number(process.env.RETRACE_BENCH_ROUNDS || 41);
const CALL = markedLine("call");

function median(values) {
  const sorted = [...values].sort((a, b) => a - b);
  return sorted[Math.floor(sorted.length / 2)];
}

/** Milliseconds of one round trip: request → stopped → stackTrace, scopes, variables. */
async function roundTrip(dc, thread, request) {
  const begin = process.hrtime.bigint();
  await stopAfter(dc, request);
  await place(dc, thread);
  return Number(process.hrtime.bigint() - begin) / 1e6;
}

/** A session stopped at the loop's first call: plain lldb-dap (native) or retrace-dap (recording). */
async function session(kind) {
  const { dc } = await client(kind);
  const args = kind === "retrace" ? { program: PROGRAM, record: "full" } : { program: PROGRAM };
  const { threadId } = await start(dc, "launch", args, [CALL]);
  // From here on the loop runs without stopping at the breakpoint.
  await dc.setBreakpointsRequest({ source: { path: require("../test/common.js").SOURCE }, breakpoints: [] });
  return { dc, threadId };
}

async function end({ dc }) {
  await dc.disconnectRequest({ terminateDebuggee: true });
  dc.stopAdapter();
}

/**
 * The two sessions side by side, interleaved round by round (so that the
 * machine's drift hits both): a `next` in plain lldb-dap; a stepBack in
 * retrace-dap, each undone by a `next` there (not timed).
 */
async function measure() {
  const plain = await session("lldb-dap");
  const retrace = await session("retrace");
  const forward = [];
  const backward = [];
  try {
    await stopAfter(retrace.dc, () => retrace.dc.nextRequest({ threadId: retrace.threadId }));
    for (let round = 0; round < ROUNDS; round++) {
      forward.push(await roundTrip(plain.dc, plain.threadId, () => plain.dc.nextRequest({ threadId: plain.threadId })));
      const t = retrace.threadId;
      backward.push(await roundTrip(retrace.dc, t, () => retrace.dc.stepBackRequest({ threadId: t })));
      await stopAfter(retrace.dc, () => retrace.dc.nextRequest({ threadId: t }));
      await stopAfter(retrace.dc, () => retrace.dc.nextRequest({ threadId: t }));
    }
  } finally {
    await end(plain);
    await end(retrace);
  }
  return { forward, backward };
}

(async () => {
  const { forward, backward } = await measure();
  const f = median(forward);
  const b = median(backward);
  console.log(`next through plain lldb-dap-22 (native)  median ${f.toFixed(1)} ms over ${forward.length} [${forward.map((t) => t.toFixed(1)).join(" ")}]`);
  console.log(`stepBack through retrace-dap (recorded) median ${b.toFixed(1)} ms over ${backward.length} [${backward.map((t) => t.toFixed(1)).join(" ")}]`);
  console.log(`ratio stepBack/next: ${(b / f).toFixed(2)} (target <= 1.5)`);
  console.log(JSON.stringify({ next_ms: f, step_back_ms: b, ratio: b / f }));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
