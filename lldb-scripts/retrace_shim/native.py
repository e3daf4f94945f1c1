"""The native bridge `retrace_native` (PyO3, `plugin/python`): the decoder
and the CLI's dumps."""

import glob
import importlib.machinery
import importlib.util
import os


def native():
    """The `retrace_native` module: importable as is, or the file
    RETRACE_NATIVE names, or the newest libretrace_native.so in this
    checkout's target/{release,debug}/."""
    try:
        import retrace_native

        return retrace_native
    except ImportError:
        pass
    candidates = [os.environ["RETRACE_NATIVE"]] if os.environ.get("RETRACE_NATIVE") else []
    if not candidates:
        # (This file is lldb-scripts/retrace_shim/native.py of the checkout.)
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        built = glob.glob(os.path.join(root, "target", "*", "libretrace_native.so"))
        candidates = sorted(built, key=os.path.getmtime, reverse=True)
    for path in candidates:
        if os.path.exists(path):
            loader = importlib.machinery.ExtensionFileLoader("retrace_native", path)
            spec = importlib.util.spec_from_file_location("retrace_native", path, loader=loader)
            module = importlib.util.module_from_spec(spec)
            loader.exec_module(module)
            return module
    # (Imported here: the bridge itself, as the line tables use it, needs
    # no LLDB.)
    from .server import RetraceError

    raise RetraceError(
        "the native bridge is not built: run `cargo build --release -p retrace-python` in the retrace checkout, "
        "or set RETRACE_NATIVE to the path of libretrace_native.so"
    )
