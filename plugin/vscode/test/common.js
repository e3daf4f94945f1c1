// What the DAP tests and the benchmark share: sessions of a DebugClient
// (@vscode/debugadapter-testsupport, as VS Code drives an adapter) with
// retrace-dap or with plain lldb-dap, and what a stop shows.
"use strict";
const fs = require("node:fs");
const { execFileSync } = require("node:child_process");
const { DebugClient } = require("@vscode/debugadapter-testsupport");

/** An environment variable the Rust driver (plugin/tests/dap_client.rs) sets. */
function setting(name) {
  const value = process.env[name];
  if (!value) throw new Error(`${name} is not set: run through \`cargo test -p retrace-plugin --test dap_client\``);
  return value;
}

const ADAPTER = setting("RETRACE_DAP");
const LLDB_DAP = setting("RETRACE_LLDB_DAP");
const PROGRAM = setting("RETRACE_DAP_PROGRAM");
const SOURCE = setting("RETRACE_DAP_SOURCE");

/** The line of SOURCE marked `line:MARKER`. */
function markedLine(marker) {
  const index = fs.readFileSync(SOURCE, "utf8").split("\n").findIndex((line) => line.includes(`line:${marker} `));
  if (index < 0) throw new Error(`no line:${marker} in ${SOURCE}`);
  return index + 1;
}

/**
 * A started client of retrace-dap (`retrace`) or of plain lldb-dap; `stops`
 * collects the body of every `stopped` event it receives, in order.
 */
async function client(kind) {
  // DebugClient spawns RUNTIME [EXECUTABLE]: retrace-dap with its lldb-dap, or lldb-dap through env.
  const dc = kind === "retrace" ? new DebugClient(ADAPTER, `--lldb-dap=${LLDB_DAP}`, "retrace") : new DebugClient("env", LLDB_DAP, "lldb-dap");
  dc.defaultTimeout = 120000;
  await dc.start();
  const stops = [];
  dc.on("stopped", (event) => stops.push(event.body));
  const init = await dc.initializeRequest({ adapterID: kind, clientID: "retrace-tests", linesStartAt1: true, columnsStartAt1: true, pathFormat: "path" });
  return { dc, capabilities: init.body || {}, stops };
}

/** The stops up to the first breakpoint's, as reason and description. */
function stopsToFirstBreakpoint(stops) {
  const first = stops.findIndex((stop) => stop.reason === "breakpoint");
  if (first < 0) throw new Error(`no breakpoint stop in ${JSON.stringify(stops)}`);
  return stops.slice(0, first + 1).map((stop) => ({ reason: stop.reason, description: stop.description }));
}

/** The processes of a session: the adapter's children and theirs (lldb-dap, the stub, the program), as { pid, name }. */
function sessionProcesses(dc) {
  const children = (pid) => {
    try {
      return execFileSync("pgrep", ["-P", String(pid)], { encoding: "utf8" }).split("\n").filter(Boolean).map(Number);
    } catch (e) {
      if (e.status === 1) return []; // pgrep: none
      throw e;
    }
  };
  const found = [];
  const walk = (pid) => {
    for (const child of children(pid)) {
      found.push({ pid: child, name: fs.readFileSync(`/proc/${child}/comm`, "utf8").trim() });
      walk(child);
    }
  };
  walk(dc._adapterProcess.pid); // (DebugClient's own process of the adapter)
  return found;
}

/** Whether `pid` runs (exists and is not a zombie). */
function running(pid) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, "utf8");
    return !/^[ZX]/.test(stat.slice(stat.lastIndexOf(")") + 2));
  } catch {
    return false;
  }
}

/**
 * The configuration sequence as VS Code runs it: `launch` (or `attach`),
 * breakpoints at `lines` once `initialized` comes, `configurationDone`;
 * resolves with the first `stopped` event's body. (lldb-dap answers the
 * launch only after configurationDone.)
 */
async function start(dc, request, args, lines) {
  const initialized = dc.waitForEvent("initialized");
  const started = request === "launch" ? dc.launchRequest(args) : dc.attachRequest(args);
  // (A refused launch rejects `started` before any `initialized`.)
  await Promise.race([initialized, started.then(() => initialized)]);
  const set = await dc.setBreakpointsRequest({ source: { path: SOURCE }, breakpoints: lines.map((line) => ({ line })) });
  for (const breakpoint of set.body.breakpoints) {
    if (!breakpoint.verified) throw new Error(`breakpoint not verified: ${JSON.stringify(breakpoint)}`);
  }
  const stopped = dc.waitForEvent("stopped");
  await dc.configurationDoneRequest();
  await started;
  return (await stopped).body;
}

/** Sends a request (a function making it) and resolves with the next `stopped` event's body. */
async function stopAfter(dc, request) {
  const stopped = dc.waitForEvent("stopped");
  const response = await request();
  if (!response.success) throw new Error(`${response.command} failed: ${response.message}`);
  return (await stopped).body;
}

/** What a stop shows: the top frame's PC, function, line and its locals (name=value). */
async function place(dc, threadId) {
  const trace = await dc.stackTraceRequest({ threadId, levels: 1 });
  const frame = trace.body.stackFrames[0];
  const scopes = await dc.scopesRequest({ frameId: frame.id });
  const locals = scopes.body.scopes.find((scope) => scope.presentationHint === "locals" || scope.name === "Locals");
  let variables = [];
  if (locals) {
    const listed = await dc.variablesRequest({ variablesReference: locals.variablesReference });
    variables = listed.body.variables.map((v) => `${v.name}=${v.value}`);
  }
  return { pc: Number(frame.instructionPointerReference), name: frame.name, line: frame.line, variables };
}

module.exports = { ADAPTER, LLDB_DAP, PROGRAM, SOURCE, markedLine, client, start, stopAfter, place, stopsToFirstBreakpoint, sessionProcesses, running };
