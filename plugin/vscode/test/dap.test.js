// retrace-dap driven as VS Code drives it (DebugClient of
// @vscode/debugadapter-testsupport), on tests/programs/step_back.c.
//
// The truth is plain lldb-dap-22 running the same program forwards,
// natively (lldb-server, no retrace): its stops at the program's entry and
// at the breakpoint, and one loop iteration walked an instruction at a
// time, each with the top frame's PC, line and locals. Every stop of
// retrace-dap — forwards, after Step Back and after Reverse Continue — must
// show what the forward run showed at the same point.
"use strict";
const assert = require("node:assert/strict");
const { test } = require("node:test");
const { execFileSync, spawn } = require("node:child_process");
const { PROGRAM, SOURCE, markedLine, client, start, stopAfter, place, stopsToFirstBreakpoint, sessionProcesses, running } = require("./common.js");

const CALL = markedLine("call");
const ADD = markedLine("add");
const ROWS = markedLine("rows");
const PRINT = markedLine("print");
const TRACE_JSON = process.env.RETRACE_DAP_TRACE_JSON;
// A full-state recording (`retrace record --full-state`): the replay shows
// the locals of every stop too, and ends as the program ended.
const FULL_STATE = process.env.RETRACE_DAP_FULL_STATE === "1";
// The CPU's Intel PT PMU is there (a launch's best recorder then).
const INTEL_PT = require("node:fs").existsSync("/sys/bus/event_source/devices/intel_pt/type");

/** Plain lldb-dap, forwards: entry, the breakpoint's hits for i = 0 and 1, then every instruction up to its hit for i = 2. */
async function forwardRun() {
  const { dc } = await client("lldb-dap");
  try {
    const first = await start(dc, "launch", { program: PROGRAM, stopOnEntry: true }, [CALL]);
    const thread = first.threadId;
    const entry = await place(dc, thread);
    const hits = [];
    for (let i = 0; i < 2; i++) {
      const stopped = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
      assert.equal(stopped.reason, "breakpoint");
      hits.push(await place(dc, thread));
    }
    const walk = [hits[1]];
    while (walk.length === 1 || walk[walk.length - 1].pc !== hits[1].pc) {
      await stopAfter(dc, () => dc.nextRequest({ threadId: thread, granularity: "instruction" }));
      walk.push(await place(dc, thread));
      assert.ok(walk.length < 200, "one loop iteration is not 200 instructions");
    }
    await dc.disconnectRequest({ terminateDebuggee: true });
    return { entry, hits, walk };
  } finally {
    dc.stopAdapter();
  }
}

/** Plain lldb-dap's launch without stopOnEntry: its stops up to the first breakpoint's. */
async function plainLaunchStops() {
  const { dc, stops } = await client("lldb-dap");
  try {
    await start(dc, "launch", { program: PROGRAM }, [CALL]);
    return stopsToFirstBreakpoint(stops);
  } finally {
    await dc.disconnectRequest({ terminateDebuggee: true });
    dc.stopAdapter();
  }
}

/**
 * Disconnects (terminateDebuggee as given) and asserts that when the
 * answer comes the stub and the program (a recording's; a replay has
 * none) are gone, and one second later lldb-dap too (it ends after it
 * answers).
 */
async function disconnectEndsEverything(dc, args, expected) {
  const processes = sessionProcesses(dc);
  const names = processes.map((p) => p.name);
  for (const name of expected) assert.ok(names.some((n) => n.startsWith(name)), `${name} among the session's processes: ${names}`);
  await dc.disconnectRequest(args);
  const before = processes.filter((p) => !p.name.startsWith("lldb-dap") && running(p.pid));
  assert.deepEqual(before, [], "disconnect is answered once the stub and the program are gone");
  await new Promise((resolve) => setTimeout(resolve, 1000));
  const left = processes.filter((p) => running(p.pid));
  assert.deepEqual(left, [], "one second after disconnect nothing the session started runs");
}

/** The forward run's record of the instruction at `pc` in the walk (the first one). */
function at(walk, pc) {
  const index = walk.findIndex((p) => p.pc === pc);
  assert.ok(index >= 0, `0x${pc.toString(16)} is not in the forward walk`);
  return index;
}

/** Same point: PC, function, line; and with `values`, the same locals. */
function assertSamePlace(actual, expected, values, what) {
  const view = (p) => ({ pc: `0x${p.pc.toString(16)}`, name: p.name, line: p.line, ...(values ? { variables: p.variables } : {}) });
  assert.deepEqual(view(actual), view(expected), what);
}

/** No process whose command line names `path` (the program, or a stub running or replaying it) within a few seconds. */
async function assertNothingLeft(path = PROGRAM) {
  for (let tries = 0; ; tries++) {
    let left = "";
    try {
      left = execFileSync("pgrep", ["-af", path], { encoding: "utf8" });
    } catch (e) {
      if (e.status === 1) return; // pgrep: no match
      throw e;
    }
    if (tries === 50) assert.fail(`processes left behind:\n${left}`);
    await new Promise((resolve) => setTimeout(resolve, 100));
  }
}

let truth;
test("forward truth from plain lldb-dap-22", async () => {
  truth = await forwardRun();
  truth.launchStops = await plainLaunchStops();
  assert.deepEqual(truth.launchStops, [{ reason: "breakpoint", description: "breakpoint 1.1" }]);
  assert.equal(truth.hits[0].line, CALL);
  assert.ok(truth.hits[1].variables.includes("i=1") && truth.hits[1].variables.includes("total=0"), `locals at the second hit: ${truth.hits[1].variables}`);
  assert.ok(truth.walk.some((p) => p.line === ADD));
  await assertNothingLeft();
});

test("launch under recording: breakpoints, next, stepBack, reverseContinue", async () => {
  assert.ok(truth, "the forward truth ran");
  const { dc, capabilities, stops } = await client("retrace");
  assert.equal(capabilities.supportsStepBack, true, "initialize announces Step Back");
  try {
    const first = await start(dc, "launch", { program: PROGRAM, record: "full" }, [CALL]);
    assert.deepEqual(stopsToFirstBreakpoint(stops), truth.launchStops, "the launch's stops up to the first breakpoint, as plain lldb-dap's");
    assert.equal(first.reason, "breakpoint");
    const thread = first.threadId;
    assertSamePlace(await place(dc, thread), truth.hits[0], true, "first breakpoint hit");
    let stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[1], true, "second breakpoint hit");

    // Forwards: next, next.
    const nexts = [];
    for (let n = 0; n < 2; n++) {
      stop = await stopAfter(dc, () => dc.nextRequest({ threadId: thread }));
      assert.equal(stop.reason, "step");
      const here = await place(dc, thread);
      assertSamePlace(here, truth.walk[at(truth.walk, here.pc)], true, `next ${n + 1}`);
      nexts.push(here);
    }
    assert.equal(nexts[0].line, ADD);
    assert.notEqual(nexts[1].line, ADD);

    // Step Back (a line): where the first next stopped.
    stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread }));
    assert.equal(stop.reason, "step");
    let here = await place(dc, thread);
    assertSamePlace(here, nexts[0], true, "stepBack: the line before");
    assertSamePlace(here, truth.walk[at(truth.walk, here.pc)], true, "stepBack against the forward run");

    // Step Back (an instruction): the instruction executed before.
    stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread, granularity: "instruction" }));
    assert.equal(stop.reason, "step");
    const previous = truth.walk[at(truth.walk, here.pc) - 1];
    here = await place(dc, thread);
    assertSamePlace(here, previous, true, "stepBack instruction: the previous instruction");

    // Reverse Continue: the breakpoint's hit for i = 1, then for i = 0, then the start of the history.
    stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[1], true, "reverseContinue: hit for i = 1");
    stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[0], true, "reverseContinue: hit for i = 0");
    stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
    assert.equal(stop.reason, "history boundary");
    assertSamePlace(await place(dc, thread), truth.entry, true, "reverseContinue: the history's start is the program's entry");

    // Forwards again (LLDB would keep running backwards after a reverse
    // continue; retrace-dap turns it forwards first): the hits for i = 0
    // and 1, and the next line after the latter.
    for (const hit of truth.hits) {
      stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
      assert.equal(stop.reason, "breakpoint");
      assertSamePlace(await place(dc, thread), hit, true, "continue after reverse continues");
    }
    stop = await stopAfter(dc, () => dc.nextRequest({ threadId: thread }));
    assert.equal(stop.reason, "step");
    assertSamePlace(await place(dc, thread), nexts[0], true, "next after reverse continues");
    // The stub ends the program, then itself.
    await disconnectEndsEverything(dc, { terminateDebuggee: true }, ["lldb-dap", "retrace-stub", "step_back"]);
    await assertNothingLeft();
  } finally {
    dc.stopAdapter();
  }
});

// A line of three line-table rows (GDB 13's reverse-next goes back row by
// row and stays on it twice): Step Back undoes plain lldb-dap's next, to
// the line's start, then leaves the line.
test("stepBack over a line of several rows: where plain lldb-dap's next started, then the line before", async () => {
  const truth = {};
  {
    const { dc } = await client("lldb-dap");
    try {
      const first = await start(dc, "launch", { program: PROGRAM }, [ROWS]);
      truth.rows = await place(dc, first.threadId);
      await stopAfter(dc, () => dc.nextRequest({ threadId: first.threadId }));
      truth.print = await place(dc, first.threadId);
      await dc.disconnectRequest({ terminateDebuggee: true });
    } finally {
      dc.stopAdapter();
    }
  }
  assert.equal(truth.rows.line, ROWS);
  assert.equal(truth.print.line, PRINT);
  const { dc } = await client("retrace");
  try {
    const first = await start(dc, "launch", { program: PROGRAM, record: "full" }, [PRINT]);
    const thread = first.threadId;
    assertSamePlace(await place(dc, thread), truth.print, true, "the breakpoint on the print line");
    let stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread }));
    assert.equal(stop.reason, "step");
    assertSamePlace(await place(dc, thread), truth.rows, true, "stepBack: where lldb-dap's next from the line of rows started");
    stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread }));
    assert.equal(stop.reason, "step");
    const here = await place(dc, thread);
    assert.equal(here.line, CALL - 1, `stepBack again: the loop's line, not the line of rows again (${JSON.stringify(here)})`);
    await dc.disconnectRequest({ terminateDebuggee: true });
    await assertNothingLeft();
  } finally {
    dc.stopAdapter();
  }
});

test("attach to a retrace-stub started by hand: breakpoint, next, stepBack", { skip: !process.env.RETRACE_STUB && "RETRACE_STUB not set" }, async () => {
  assert.ok(truth, "the forward truth ran");
  const stub = spawn(process.env.RETRACE_STUB, ["--record", "--listen", "127.0.0.1:0", "--", PROGRAM], { stdio: ["ignore", "ignore", "pipe"] });
  const { dc } = await client("retrace");
  try {
    const port = await new Promise((resolve, reject) => {
      let said = "";
      stub.stderr.on("data", (data) => {
        said += data;
        const listening = /listening on [^\s]*:(\d+)/.exec(said);
        if (listening) resolve(Number(listening[1]));
      });
      stub.on("exit", () => reject(new Error(`retrace-stub ended: ${said}`)));
    });
    const first = await start(dc, "attach", { program: PROGRAM, "gdb-remote-port": port }, [CALL]);
    assert.equal(first.reason, "breakpoint");
    const thread = first.threadId;
    assertSamePlace(await place(dc, thread), truth.hits[0], true, "attach: first breakpoint hit");
    await stopAfter(dc, () => dc.nextRequest({ threadId: thread }));
    const stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread }));
    // Landing on the breakpoint's address, LLDB reports the breakpoint (as GDB does).
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[0], true, "attach: stepBack to the breakpoint's line");
    await dc.disconnectRequest({ terminateDebuggee: true });
    await assertNothingLeft();
  } finally {
    dc.stopAdapter();
    stub.kill("SIGKILL");
  }
});

test("replay of a saved trace: breakpoints, reverseContinue, stepBack", { skip: !TRACE_JSON && "RETRACE_DAP_TRACE_JSON not set" }, async () => {
  assert.ok(truth, "the forward truth ran");
  const { dc, stops } = await client("retrace");
  try {
    // From the history's start, forwards as the program ran: the same stops as a launch of it.
    const first = await start(dc, "launch", { replay: TRACE_JSON, program: PROGRAM }, [CALL]);
    assert.deepEqual(stopsToFirstBreakpoint(stops), truth.launchStops, "the replay's stops up to the first breakpoint, as plain lldb-dap's launch");
    const thread = first.threadId;
    assertSamePlace(await place(dc, thread), truth.hits[0], false, "replay: hit for i = 0");
    let stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[1], false, "replay continue: hit for i = 1");
    stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    const last = truth.walk[truth.walk.length - 1];
    assertSamePlace(await place(dc, thread), last, FULL_STATE, "replay continue: hit for i = 2");
    if (!FULL_STATE) {
      // On to the end of the history, and back to the breakpoint's last hit (i = 2).
      stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
      assert.equal(stop.reason, "history boundary");
      stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
      assert.equal(stop.reason, "breakpoint");
      assertSamePlace(await place(dc, thread), last, false, "replay reverseContinue: hit for i = 2");
    }
    // Step Back a line: the start of the loop's increment line, as the forward run went.
    stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread }));
    assert.equal(stop.reason, "step");
    let here = await place(dc, thread);
    let lineStart = truth.walk.length - 2;
    while (truth.walk[lineStart - 1].line === truth.walk[lineStart].line) lineStart--;
    assertSamePlace(here, truth.walk[lineStart], FULL_STATE, "replay stepBack: the start of the line before");
    // Step Back an instruction.
    stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread, granularity: "instruction" }));
    assert.equal(stop.reason, "step");
    here = await place(dc, thread);
    assertSamePlace(here, truth.walk[lineStart - 1], FULL_STATE, "replay stepBack instruction");
    // The hits for i = 1 and 0, then the start.
    for (const hit of [truth.hits[1], truth.hits[0]]) {
      stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
      assert.equal(stop.reason, "breakpoint");
      assertSamePlace(await place(dc, thread), hit, FULL_STATE, "replay reverseContinue");
    }
    stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
    assert.equal(stop.reason, "history boundary");
    assertSamePlace(await place(dc, thread), truth.entry, false, "replay: the history's start");
    if (FULL_STATE) {
      // Forwards past the end: the program exits as it did when recorded.
      await dc.setBreakpointsRequest({ source: { path: SOURCE }, breakpoints: [] });
      const exited = dc.waitForEvent("exited", 20000);
      await dc.continueRequest({ threadId: thread });
      assert.equal((await exited).body.exitCode, 0, "the recorded exit status");
    }
    // (After the exit the stub's session is over: only lldb-dap is sure to run.)
    await disconnectEndsEverything(dc, {}, FULL_STATE ? ["lldb-dap"] : ["lldb-dap", "retrace-stub"]);
    await assertNothingLeft(PROGRAM);
    await assertNothingLeft(TRACE_JSON);
  } finally {
    dc.stopAdapter();
  }
});

test("replay of a saved trace that names a file outside its folder is refused with the reason, and nothing starts", async () => {
  const fs = require("node:fs");
  const os = require("node:os");
  const path = require("node:path");
  // A trace from someone else, naming the program by its absolute path.
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), "retrace-hostile-"));
  const traceJson = path.join(dir, "trace.json");
  const bundle = {
    type: "intel-pt",
    cpuInfo: { vendor: "GenuineIntel", family: 6, model: 85, stepping: 4 },
    processes: [{ pid: 1, threads: [{ tid: 1, iptTrace: "threads/1.intelpt_trace" }], modules: [{ systemPath: PROGRAM, file: PROGRAM, loadAddress: "0x400000" }] }],
  };
  fs.writeFileSync(traceJson, JSON.stringify(bundle));
  const { dc } = await client("retrace");
  try {
    await assert.rejects(dc.launchRequest({ replay: traceJson }), (error) => {
      assert.match(error.message, /is an absolute path/);
      assert.match(error.message, /"allowOutsideBundle": true/);
      return true;
    });
    assert.deepEqual(sessionProcesses(dc).filter((p) => !p.name.startsWith("lldb-dap")), [], "no stub was started");
  } finally {
    dc.stopAdapter();
    fs.rmSync(dir, { recursive: true, force: true });
  }
});

test("launch with the best recorder, Valgrind here: breakpoints with locals, reverseContinue, stepBack", { skip: !FULL_STATE && "RETRACE_DAP_FULL_STATE not set" }, async () => {
  assert.ok(truth, "the forward truth ran");
  const { dc } = await client("retrace");
  const console = [];
  dc.on("output", (event) => event.body.category === "console" && console.push(event.body.output));
  try {
    // No `record`: the best recorder here (without Intel PT, Valgrind:
    // installed, as RETRACE_DAP_FULL_STATE says), named in the Debug
    // Console. (Where the CPU has Intel PT, that is the best: Valgrind is
    // then asked for.) The program runs to its end under Valgrind; the
    // session replays the recording from its start.
    const first = await start(dc, "launch", INTEL_PT ? { program: PROGRAM, record: "valgrind" } : { program: PROGRAM }, [CALL]);
    const chose = console.find((line) => line.startsWith("retrace-dap: recording with "));
    assert.ok(INTEL_PT || (chose && chose.startsWith("retrace-dap: recording with Valgrind, full state (no Intel PT: ")), `the Debug Console names the recorder: ${console.join("")}`);
    const thread = first.threadId;
    assertSamePlace(await place(dc, thread), truth.hits[0], true, "record valgrind: hit for i = 0");
    let stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[1], true, "record valgrind continue: hit for i = 1");
    // On to the hit for i = 2, then a data breakpoint on `total` (lldb-dap
    // asks the stub which memory region holds it and refuses one without
    // write permission), reverse: the stop is where i = 1 added to it, the
    // last change (i = 0 added 0).
    stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    const frame = (await dc.stackTraceRequest({ threadId: thread, levels: 1 })).body.stackFrames[0];
    const locals = (await dc.scopesRequest({ frameId: frame.id })).body.scopes.find((scope) => scope.presentationHint === "locals" || scope.name === "Locals");
    const info = await dc.customRequest("dataBreakpointInfo", { variablesReference: locals.variablesReference, name: "total" });
    assert.ok(info.body.dataId, `a data breakpoint on total: ${JSON.stringify(info.body)}`);
    const set = await dc.customRequest("setDataBreakpoints", { breakpoints: [{ dataId: info.body.dataId, accessType: "write" }] });
    assert.ok(set.body.breakpoints[0].verified, `the data breakpoint set: ${JSON.stringify(set.body)}`);
    await dc.setBreakpointsRequest({ source: { path: SOURCE }, breakpoints: [] });
    stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
    assert.equal(stop.reason, "data breakpoint", `stopped by the data breakpoint: ${JSON.stringify(stop)}`);
    const write = await place(dc, thread);
    assert.equal(write.line, ADD, "the write to total: the line adding to it");
    assert.ok(write.variables.includes("i=1"), `the write for i = 1: ${write.variables}`);
    await dc.customRequest("setDataBreakpoints", { breakpoints: [] });
    await dc.setBreakpointsRequest({ source: { path: SOURCE }, breakpoints: [{ line: CALL }] });
    stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[1], true, "record valgrind reverseContinue: hit for i = 1");
    stop = await stopAfter(dc, () => dc.reverseContinueRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[0], true, "record valgrind reverseContinue: hit for i = 0");
    stop = await stopAfter(dc, () => dc.continueRequest({ threadId: thread }));
    stop = await stopAfter(dc, () => dc.nextRequest({ threadId: thread }));
    // Back onto the call line, where the breakpoint is: reported as its hit.
    stop = await stopAfter(dc, () => dc.stepBackRequest({ threadId: thread }));
    assert.equal(stop.reason, "breakpoint");
    assertSamePlace(await place(dc, thread), truth.hits[1], true, "record valgrind stepBack: the hit for i = 1 again");
    await disconnectEndsEverything(dc, {}, ["lldb-dap", "retrace-stub"]);
    await assertNothingLeft(PROGRAM);
  } finally {
    dc.stopAdapter();
  }
});
