"""Run INSIDE the container with the venv's python: validate an argv with the installed sglang's own parser.

Prints one JSON document: {"version", "ok", "error", "actions": [...]} where actions has the same shape as
shared/reference/sglang-*-server-flags.json, so the operator's machine can canonicalise names without importing
sglang. Nothing here touches a GPU or loads a model: it only builds the argparse parser.
Usage: python - ARGV_JSON < this_file
"""

import argparse
import contextlib
import io
import json
import sys


def main() -> int:
    argv = json.loads(sys.argv[1]) if len(sys.argv) > 1 else []
    try:
        import sglang
        from sglang.srt.server_args import ServerArgs
    except Exception as exc:  # report, do not crash: the caller turns this into a clear error
        print(json.dumps({"ok": False, "error": f"cannot import sglang: {exc}", "version": None, "actions": []}))
        return 0
    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    actions = []
    for act in parser._actions:
        if isinstance(act, argparse._HelpAction):
            continue
        actions.append({
            "option_strings": list(act.option_strings),
            "dest": act.dest,
            "nargs": act.nargs if isinstance(act.nargs, int | str | type(None)) else str(act.nargs),
            "choices": sorted(map(str, act.choices)) if isinstance(act.choices, set) else
            (list(act.choices) if act.choices is not None else None),
            "type": getattr(act.type, "__name__", None) if act.type is not None else None,
            "default": (act.default if isinstance(act.default, str | int | float | bool | type(None))
                        else str(act.default)),
            "action": type(act).__name__,
            "required": act.required,
            "help": (act.help or "")[:200],
        })
    err = io.StringIO()
    ok = True
    message = ""
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            ok = exc.code == 0
            message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    print(json.dumps({"ok": ok, "error": message, "version": getattr(sglang, "__version__", None),
                      "actions": actions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
