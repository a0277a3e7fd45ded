"""Run with the router's venv python: validate an argv with the installed sglang-router's own parser.

Prints one JSON document: {"version", "ok", "error", "actions": [...]}, actions in the same shape as the sglang
server probe (orchestrator/probes/sglang_flags_probe.py), so the operator's machine canonicalises router flags with
the same code. Builds the parser only (RouterArgs.add_cli_args, as `python -m sglang_router.launch_router` does);
starts nothing. Usage: python - ARGV_JSON < this_file
"""

import argparse
import contextlib
import io
import json
import sys


def main() -> int:
    argv = json.loads(sys.argv[1]) if len(sys.argv) > 1 else []
    try:
        from importlib.metadata import version

        from sglang_router.router_args import RouterArgs
    except Exception as exc:  # report, do not crash: the caller turns this into a clear error
        print(json.dumps({"ok": False, "error": f"cannot import sglang_router: {exc}", "version": None,
                          "actions": []}))
        return 0
    parser = argparse.ArgumentParser(prog="sglang_router.launch_router")
    RouterArgs.add_cli_args(parser, use_router_prefix=False)
    actions = []
    for act in parser._actions:
        if isinstance(act, argparse._HelpAction):
            continue
        actions.append({
            "option_strings": list(act.option_strings),
            "dest": act.dest,
            "nargs": act.nargs if isinstance(act.nargs, int | str | type(None)) else str(act.nargs),
            "choices": list(act.choices) if act.choices is not None else None,
            "type": getattr(act.type, "__name__", None) if act.type is not None else None,
            "default": (act.default if isinstance(act.default, str | int | float | bool | type(None))
                        else str(act.default)),
            "action": type(act).__name__,
            "required": act.required,
            "help": (act.help or "")[:200],
        })
    err = io.StringIO()
    ok, message = True, ""
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            ok = exc.code == 0
            message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    print(json.dumps({"ok": ok, "error": message, "version": version("sglang-router"), "actions": actions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
