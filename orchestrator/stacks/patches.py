"""Stack patches: unified diffs against a stack venv's site-packages, shipped with the inventory (`patches:`).

A profile names its patch files (paths relative to the inventory directory of the file that defines it); the
loader reads them, and their content is part of the stack's identity (orchestrator/stacks.py), so an added or
changed patch is another stack, built beside the running one and never applied to a running stack in place.

When the stack is built, each patch is checked with GNU patch's dry run (`--dry-run --forward --fuzz=0`) and then
applied, in the profile's order; a patch that does not apply removes the half-built venv and is a ConfigError
naming the patch file and the failing hunk. The sha256 of every patched file goes into the stack's record, so
`status` and `plan` can show a patched file changed behind the tool's back.

Pure: text in, typed values and shell text out; the step (steps/software.py) runs the script through the container
adapter.
"""

from __future__ import annotations

import hashlib
import json
import re
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from orchestrator.errors import ConfigError

#: `@@ -35,7 +35,7 @@ optional section heading`
HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")
#: GNU patch's lines we read from a dry run.
CHECKING = re.compile(r"^(?:checking|patching) file (.+?)\s*$")
FAILED = re.compile(r"^Hunk #(\d+) FAILED at (\d+)")
#: Marks the remote script prints around each patch (PATCH_MARK index) and after each patched file.
PATCH_MARK = "deploy-patch"
FAILED_MARK = "deploy-patch-failed"
PATCHED_MARK = "deploy-patched"
#: The exit code the script ends with when a patch does not apply (the venv already removed).
NOT_APPLIED_RC = 3
#: GNU patch is not in a stock Debian container (priority optional); ct_packages installs it.
PATCH_TOOL = "patch"


@dataclass(frozen=True)
class Hunk:
    number: int  # 1-based within its file, as patch numbers them
    header: str  # the `@@ … @@` line
    old_start: int


@dataclass(frozen=True)
class FilePatch:
    path: str  # relative to site-packages, after the strip
    hunks: tuple[Hunk, ...]


@dataclass(frozen=True)
class Patch:
    """One patch file of a profile: its name as the profile writes it, its text, what it touches."""

    name: str
    text: str
    strip: int
    files: tuple[FilePatch, ...]

    @property
    def sha(self) -> str:
        return hashlib.sha256(self.text.encode()).hexdigest()

    @property
    def paths(self) -> tuple[str, ...]:
        return tuple(f.path for f in self.files)

    def hunk(self, path: str, number: int) -> Hunk | None:
        f = next((f for f in self.files if f.path == path), None)
        return next((h for h in f.hunks if h.number == number), None) if f else None


def _header_path(line: str) -> str:
    """The path of a `--- X` / `+++ X` line, without its tab-separated timestamp."""
    return line[4:].split("\t", 1)[0].strip()


def _strip(old: str, new: str) -> int:
    return 1 if old.startswith("a/") and new.startswith("b/") else 0


def _relative(path: str, strip: int) -> str:
    return path.split("/", strip)[strip] if strip else path


def parse_patch(text: str, name: str) -> Patch:
    """A unified diff (as `diff -u` or `git diff` write it) → the files and hunks it touches.

    Paths are relative to site-packages: `--- a/sglang/…` `+++ b/sglang/…` (strip 1) or `sglang/…` (strip 0).
    A diff that creates or deletes a file, or reaches outside site-packages, is refused.
    """
    lines = text.splitlines()
    files: list[FilePatch] = []
    strips: set[int] = set()
    i = 0
    while i < len(lines):
        if not (lines[i].startswith("--- ") and i + 1 < len(lines) and lines[i + 1].startswith("+++ ")):
            i += 1
            continue
        old, new = _header_path(lines[i]), _header_path(lines[i + 1])
        if "/dev/null" in (old, new):
            raise ConfigError(f"patch {name} creates or deletes {new if old == '/dev/null' else old}: a stack "
                              "patch may only change files pip installed",
                              fix="patch an existing file of the venv's site-packages (docs/stacks.md#patches)")
        strip = _strip(old, new)
        path = _relative(new, strip)
        if path.startswith("/") or ".." in path.split("/") or not path:
            raise ConfigError(f"patch {name} names {new!r}, outside the venv's site-packages",
                              fix="write paths relative to site-packages: `--- a/sglang/…` `+++ b/sglang/…`")
        strips.add(strip)
        i += 2
        hunks: list[Hunk] = []
        while i < len(lines) and not (lines[i].startswith("--- ") and i + 1 < len(lines)
                                      and lines[i + 1].startswith("+++ ")):
            m = HUNK.match(lines[i])
            if m:
                hunks.append(Hunk(len(hunks) + 1, lines[i].strip(), int(m[1])))
            i += 1
        if not hunks:
            raise ConfigError(f"patch {name}: {path} has no hunk (`@@ -N,M +N,M @@`)",
                              fix="write the patch with `diff -u` or `git diff` (a unified diff)")
        files.append(FilePatch(path, tuple(hunks)))
    if not files:
        raise ConfigError(f"patch {name} is not a unified diff (no `--- ` / `+++ ` file header)",
                          fix="write the patch with `diff -u OLD NEW` or `git diff` against the venv's site-packages")
    if len(strips) > 1:
        raise ConfigError(f"patch {name} mixes `a/`/`b/` prefixed paths with bare ones",
                          fix="write every file header the same way (`git diff` writes a/ and b/)")
    return Patch(name, text, strips.pop(), tuple(files))


def patches_sha(patches: Sequence[Patch]) -> str:
    """What a stack's identity takes from its patches: their contents in order (a renamed file is the same stack)."""
    return hashlib.sha256("\n".join(p.sha for p in patches).encode()).hexdigest()


@dataclass(frozen=True)
class NotApplied:
    """A patch GNU patch's dry run refused: which one, which file and hunk, and what patch said."""

    patch: str
    file: str | None
    hunk: Hunk | None
    hunk_number: int | None
    at_line: int | None
    reason: str
    said: str

    def describe(self) -> str:
        if self.hunk_number is not None:
            head = self.hunk.header if self.hunk is not None else ""
            return (f"{self.file}: hunk #{self.hunk_number}{f' ({head})' if head else ''} does not apply"
                    + (f" (expected at line {self.at_line})" if self.at_line else ""))
        return f"{self.file or '(no file)'}: {self.reason}"


def read_dry_run(patch: Patch, output: str) -> NotApplied:
    """GNU patch's dry-run output of a patch that failed → the first file and hunk it could not apply."""
    current: str | None = None
    for line in output.splitlines():
        if m := CHECKING.match(line):
            current = m[1]
            continue
        if m := FAILED.match(line):
            number, at = int(m[1]), int(m[2])
            return NotApplied(patch.name, current, patch.hunk(current or "", number), number, at,
                              "hunk failed", output.strip())
        if line.startswith("Reversed (or previously applied) patch detected"):
            return NotApplied(patch.name, current, None, None, None,
                              "already applied (patch found it reversed)", output.strip())
        if line.startswith("can't find file to patch"):
            missing = next((f.path for f in patch.files if f"/{f.path}" in output or f" {f.path}" in output), None)
            return NotApplied(patch.name, missing or (patch.paths[0] if patch.paths else None), None, None, None,
                              "no such file in the venv's site-packages", output.strip())
        if "Only garbage was found" in line or "malformed patch" in line:
            return NotApplied(patch.name, current, None, None, None, "patch cannot read it", output.strip())
    return NotApplied(patch.name, current, None, None, None, "patch refused it", output.strip())


def not_applied_error(failure: NotApplied, *, stack: str, sglang: str, host: str) -> ConfigError:
    return ConfigError(
        f"patch {failure.patch} does not apply to sglang {sglang} (stack {stack}): {failure.describe()}; the "
        "half-built stack was removed and the server was not touched",
        host=host, details={"patch": failure.patch, "file": failure.file, "hunk": failure.hunk_number,
                            "hunk_header": failure.hunk.header if failure.hunk else None,
                            "patch_output": failure.said[-2000:]},
        fix=(f"rebase {failure.patch} on the file sglang {sglang} installs (its hunks must match exactly: no fuzz; "
             "`pip download sglang==VERSION --no-deps` and `diff -u` the file), or remove it from the profile's "
             "`patches:` (docs/stacks.md#patches)"))


def apply_script(patches: Sequence[Patch], venv: str, *, remove_on_failure: bool) -> str:
    """One script: each patch written into VENV/deploy-patches/, dry-run checked, then applied, in order; then the
    sha256 of every patched file. A patch that does not apply prints FAILED_MARK with its index, the venv is
    removed (when `remove_on_failure`: a stack built for this run) and the script exits NOT_APPLIED_RC."""
    q = shlex.quote(venv)
    lines = ["set -u", f"site=$(ls -d {q}/lib/python3*/site-packages 2>/dev/null | head -n 1)",
             f'[ -n "$site" ] || {{ echo "no site-packages in {venv}" >&2; exit 1; }}',
             f"command -v {PATCH_TOOL} >/dev/null || {{ echo 'GNU patch is not installed' >&2; exit 127; }}",
             f"mkdir -p {q}/deploy-patches"]
    cleanup = f"rm -rf {q}; " if remove_on_failure else ""
    for index, p in enumerate(patches):
        file = shlex.quote(f"{venv}/deploy-patches/{index:02d}-{p.name.rsplit('/', 1)[-1]}")
        opts = f"-p{p.strip} --forward --batch --fuzz=0 -d \"$site\" -i {file}"
        lines += [f"printf '%s' {shlex.quote(p.text)} > {file}",
                  f"printf '{PATCH_MARK}\\t%s\\n' {index}",
                  f"if ! {PATCH_TOOL} --dry-run {opts} 2>&1; then printf '{FAILED_MARK}\\t%s\\n' {index}; "
                  f"{cleanup}exit {NOT_APPLIED_RC}; fi",
                  f"{PATCH_TOOL} --no-backup-if-mismatch {opts} >/dev/null 2>&1 || {{ printf '{FAILED_MARK}\\t%s\\n' "
                  f"{index}; {cleanup}exit {NOT_APPLIED_RC}; }}"]
    for path in dict.fromkeys(path for p in patches for path in p.paths):
        lines.append(f"printf '{PATCHED_MARK}\\t%s\\t%s\\n' {shlex.quote(path)} "
                     f"\"$(sha256sum \"$site\"/{shlex.quote(path)} | cut -d ' ' -f 1)\"")
    return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class ApplyResult:
    patched: dict[str, str]  # path relative to site-packages → sha256 after the patches
    failed: NotApplied | None


def read_apply_output(patches: Sequence[Patch], output: str) -> ApplyResult:
    """The apply script's stdout → the patched files' sha256, or the patch that did not apply (with its dry run)."""
    patched: dict[str, str] = {}
    sections: dict[int, list[str]] = {}
    index: int | None = None
    for line in output.splitlines():
        mark, _, rest = line.partition("\t")
        if mark == PATCH_MARK and rest.strip().isdigit():
            index = int(rest)
            sections[index] = []
        elif mark == FAILED_MARK and rest.strip().isdigit():
            i = int(rest)
            if 0 <= i < len(patches):
                return ApplyResult({}, read_dry_run(patches[i], "\n".join(sections.get(i, []))))
        elif mark == PATCHED_MARK:
            path, _, sha = rest.partition("\t")
            if sha.strip():
                patched[path] = sha.strip()
        elif index is not None:
            sections[index].append(line)
    return ApplyResult(patched, None)


def patch_drift(recorded: Mapping[str, str], current: Mapping[str, str | None], patches: Sequence[str] = ()) -> \
        list[str]:
    """A patched file whose sha256 is no longer the one recorded when the stack was built (changed or removed
    behind the tool's back), by name."""
    by = f" (patched by {', '.join(patches)})" if patches else ""
    out = []
    for path, want in sorted(recorded.items()):
        have = current.get(path)
        if have is None:
            out.append(f"{path} is missing from the stack's venv{by}")
        elif have != want:
            out.append(f"{path} changed behind the tool's back (sha256 {want[:12]}… recorded when the stack was "
                       f"built, now {have[:12]}…){by}")
    return out


#: The fact's program: every stack record with patched files → {sha: {path: [recorded, current or null]}}.
PATCHED_FILES_PROGRAM = """\
import glob, hashlib, json, os, sys
out = {}
for rec in sorted(glob.glob(os.path.join(sys.argv[1], "*.json"))):
    try:
        with open(rec) as fh:
            data = json.load(fh)
        patched = data.get("patched") or {}
    except (OSError, ValueError, AttributeError):
        continue
    if not patched or not data.get("sha") or not data.get("venv"):
        continue
    sites = sorted(glob.glob(os.path.join(data["venv"], "lib", "python3*", "site-packages")))
    files = {}
    for path, want in patched.items():
        try:
            with open(os.path.join(sites[0], path), "rb") as fh:
                files[path] = [want, hashlib.sha256(fh.read()).hexdigest()]
        except (OSError, IndexError):
            files[path] = [want, None]
    out[data["sha"]] = files
print(json.dumps(out, sort_keys=True))
"""


@dataclass(frozen=True)
class PatchedFiles:
    """One stack's patched files: what its record says, and what is in its venv now."""

    recorded: dict[str, str]
    current: dict[str, str | None]


def parse_patched_files(text: str) -> dict[str, PatchedFiles]:
    """The fact's JSON line → by stack sha; anything unreadable is no stack."""
    try:
        data = json.loads(text.strip().splitlines()[-1]) if text.strip() else {}
    except (ValueError, IndexError):
        return {}
    out: dict[str, PatchedFiles] = {}
    if not isinstance(data, dict):
        return out
    for sha, files in data.items():
        if not isinstance(files, dict):
            continue
        rec = {str(p): str(v[0]) for p, v in files.items() if isinstance(v, list) and len(v) == 2}
        cur = {str(p): (str(v[1]) if v[1] is not None else None) for p, v in files.items()
               if isinstance(v, list) and len(v) == 2}
        out[str(sha)] = PatchedFiles(rec, cur)
    return out
