"""Run with the target venv's python: validate an argv with the INSTALLED parser of sglang or the router.

Prints one JSON document: {"version", "ok", "error", "actions": [...]} where actions has the same shape as the
packaged schemas (orchestrator/flags/schemas), so the operator's machine canonicalises names with one piece of code
and never imports either package. It only builds the argparse parser: nothing starts, no GPU is touched.
Usage: python - KIND ARGV_JSON < this_file, KIND = sglang | router (sglang-router) | smg (the Model Gateway,
whose `smg launch` parses the same RouterArgs)
"""

import argparse
import contextlib
import io
import json
import sys


def build_parser(kind: str) -> "tuple[argparse.ArgumentParser, str | None]":
    """The parser the package itself builds for its command line, and the package's version."""
    if kind == "smg":
        from importlib.metadata import version

        from smg.router_args import RouterArgs

        parser = argparse.ArgumentParser(prog="smg launch")
        RouterArgs.add_cli_args(parser, use_router_prefix=False)
        return parser, version("smg")
    if kind == "router":
        from importlib.metadata import version

        from sglang_router.router_args import RouterArgs

        parser = argparse.ArgumentParser(prog="sglang_router.launch_router")
        RouterArgs.add_cli_args(parser, use_router_prefix=False)
        return parser, version("sglang-router")
    import sglang
    from sglang.srt.server_args import ServerArgs

    parser = argparse.ArgumentParser(prog="sglang serve")
    ServerArgs.add_cli_args(parser)
    return parser, getattr(sglang, "__version__", None)


def _module_of(filename: str) -> "str | None":
    """A frame's file under site-packages → its dotted module name (`kernels/utils.py` → `kernels.utils`)."""
    marker = "site-packages/"
    if marker not in filename or not filename.endswith(".py"):
        return None
    rel = filename.rsplit(marker, 1)[1][:-3]
    return rel.removesuffix("/__init__").replace("/", ".")


def import_failure(exc: BaseException) -> dict:
    """Where an import failed: the exception, the chain of installed modules its traceback went through, and the
    distribution (with its version) of the module that raised it, so the operator learns which pin to add."""
    import traceback

    chain: list = []
    for frame in traceback.extract_tb(exc.__traceback__):
        name = _module_of(frame.filename)
        if name is not None and (not chain or chain[-1] != name):
            chain.append(name)
    top = chain[-1].split(".")[0] if chain else None
    dist, version = None, None
    if top is not None:
        try:
            from importlib.metadata import packages_distributions
            from importlib.metadata import version as dist_version

            dist = (packages_distributions().get(top) or [top])[0]
            version = dist_version(dist)
        except Exception:
            pass
    return {"exception": type(exc).__name__, "message": str(exc).strip().splitlines()[-1] if str(exc).strip() else "",
            "module": chain[-1] if chain else None, "distribution": dist, "version": version, "chain": chain}


def describe(act: argparse.Action) -> dict:
    return {
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
    }


def main() -> int:
    kind = sys.argv[1] if len(sys.argv) > 1 else "sglang"
    argv = json.loads(sys.argv[2]) if len(sys.argv) > 2 else []
    package = {"router": "sglang_router", "smg": "smg"}.get(kind, "sglang")
    try:
        parser, version = build_parser(kind)
    except Exception as exc:  # report, do not crash: the caller turns this into a clear error
        print(json.dumps({"ok": False, "error": f"cannot import {package}: {type(exc).__name__}: {exc}",
                          "version": None, "actions": [], "import_error": import_failure(exc)}))
        return 0
    actions = [describe(a) for a in parser._actions if not isinstance(a, argparse._HelpAction)]
    err = io.StringIO()
    ok, message = True, ""
    with contextlib.redirect_stderr(err):
        try:
            parser.parse_args(argv)
        except SystemExit as exc:
            ok = exc.code == 0
            message = err.getvalue().strip().splitlines()[-1] if err.getvalue().strip() else f"exit {exc.code}"
    print(json.dumps({"ok": ok, "error": message, "version": version, "actions": actions}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
