"""The container venv's `pip` (simulated): switch between the sglang releases whose schemas we have.

Offline like the target host: only `sglang==<known version>` "installs" (it rewrites the venv's version file,
which picks the flag schema); anything else fails with pip's own "No matching distribution" wording.
"""

from __future__ import annotations

import json
import re
import sys

from sglang._sim.env import KNOWN_VERSIONS, installed_version, version_file

PIP_VERSION = "24.0"


def _site() -> str:
    return f"{sys.prefix}/lib/python{sys.version_info.major}.{sys.version_info.minor}/site-packages"


def install(reqs: list[str]) -> int:
    if not reqs:
        print("ERROR: You must give at least one requirement to install (see \"pip help install\")", file=sys.stderr)
        return 1
    for req in reqs:
        m = re.fullmatch(r"sglang(?:\[[\w,-]+\])?(?:==([\w.+-]+))?", req)
        if not m:
            name = re.split(r"[<>=!\[ ]", req, maxsplit=1)[0]
            print(f"ERROR: Could not find a version that satisfies the requirement {req} (from versions: none)",
                  file=sys.stderr)
            print(f"ERROR: No matching distribution found for {name if '=' not in req else req}", file=sys.stderr)
            return 1
        want = m.group(1) or KNOWN_VERSIONS[-1]
        if want not in KNOWN_VERSIONS:
            print(f"ERROR: Could not find a version that satisfies the requirement {req} "
                  f"(from versions: {', '.join(KNOWN_VERSIONS)})", file=sys.stderr)
            print(f"ERROR: No matching distribution found for {req}", file=sys.stderr)
            return 1
        have = installed_version()
        if have == want:
            print(f"Requirement already satisfied: {req} in {_site()} ({have})")
            continue
        print(f"Collecting {req}")
        print(f"  Using cached sglang-{want}-py3-none-any.whl.metadata (24 kB)")
        print("Installing collected packages: sglang\n  Attempting uninstall: sglang\n"
              "    Found existing installation: "
              f"sglang {have}\n    Uninstalling sglang-{have}:\n      Successfully uninstalled sglang-{have}")
        version_file().write_text(json.dumps({"version": want}) + "\n")
        print(f"Successfully installed sglang-{want}")
    return 0


def show(names: list[str]) -> int:
    if [n.lower() for n in names] != ["sglang"]:
        missing = [n for n in names if n.lower() != "sglang"]
        print(f"WARNING: Package(s) not found: {', '.join(missing)}", file=sys.stderr)
        return 1
    print(f"Name: sglang\nVersion: {installed_version()}\nSummary: SGLang is a fast serving framework for large "
          f"language models and vision language models.\nHome-page: \nAuthor: \nAuthor-email: \nLicense: "
          f"Apache-2.0\nLocation: {_site()}\nRequires: aiohttp, requests\nRequired-by: ")
    return 0


#: pip options that take a value as the next word (so the value is not read as a package name).
VALUE_OPTIONS = {"--progress-bar", "-i", "--index-url", "--extra-index-url", "-c", "--constraint", "-r",
                 "--requirement", "--target", "-t", "--cache-dir", "--timeout", "--retries", "--python-version",
                 "--platform", "--only-binary", "--no-binary", "-f", "--find-links", "--root", "--prefix"}


def _positionals(words: list[str]) -> list[str]:
    out, skip = [], False
    for word in words:
        if skip:
            skip = False
        elif word in VALUE_OPTIONS:
            skip = True
        elif not word.startswith("-"):
            out.append(word)
    return out


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if not args or args[0] in ("-V", "--version"):
        py = f"{sys.version_info.major}.{sys.version_info.minor}"
        print(f"pip {PIP_VERSION} from {_site()}/pip (python {py})")
        return 0
    cmd, rest = args[0], _positionals(args[1:])
    if cmd == "install":
        return install(rest)
    if cmd == "show":
        return show(rest)
    if cmd in ("freeze", "list"):
        print(f"sglang=={installed_version()}" if cmd == "freeze" else f"Package Version\n------- -------\n"
              f"sglang  {installed_version()}")
        return 0
    print(f'ERROR: unknown command "{cmd}"', file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main())
