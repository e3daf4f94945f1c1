// The retrace extension: debug sessions of type "retrace" run retrace-dap,
// lldb-dap with Step Back and Reverse Continue (plugin/src/dap).
"use strict";
const vscode = require("vscode");

/** retrace-dap and its options, from the retrace.* settings. */
function adapterExecutable() {
  const settings = vscode.workspace.getConfiguration("retrace");
  const args = [];
  for (const [setting, option] of [["lldbDapPath", "--lldb-dap"], ["stubPath", "--stub"], ["shimPath", "--shim"]]) {
    const value = settings.get(setting);
    if (value) args.push(option, value);
  }
  return new vscode.DebugAdapterExecutable(settings.get("adapterPath") || "retrace-dap", args);
}

function activate(context) {
  context.subscriptions.push(
    vscode.debug.registerDebugAdapterDescriptorFactory("retrace", {
      createDebugAdapterDescriptor() {
        return adapterExecutable();
      },
    })
  );
}

function deactivate() {}

module.exports = { activate, deactivate };
