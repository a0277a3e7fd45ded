"""Run INSIDE the container with the python of the `hf` it uses (huggingface_hub): the hub's side of the weights.

`resolve REPO REVISION`: prints the commit the revision names now, so the download and its record agree; it also
lists that commit's files, so a gated or private repo is refused here with the hub's own answer, before `hf
download` starts (the Hub shows a gated model's info to anyone, its files only to a granted token).
`record REPO COMMIT DIR RECORD`: lists every file of that commit with its size (the hub's file tree), checks each
in DIR and writes DIR/RECORD (REPO<TAB>COMMIT, then SIZE<TAB>PATH lines) only when every one is there with its
size; otherwise prints `missing<TAB>PATH<TAB>HAVE<TAB>WANT` for each that is not and exits 1.
`need REPO COMMIT DIR`: after a failed download, `disk<TAB>FREE<TAB>NEED<TAB>FILES`: the bytes free under DIR, and
the bytes and number of files the rest of the download still has to write (partial files this hub version keeps
for a resume count as written).
A refusal of the hub prints `hub-refused<TAB>CODE<TAB>STATUS<TAB>MESSAGE` (CODE: the hub's X-Error-Code, or -) on
stderr and exits 3. Every mode prints `hub-client<TAB>VERSION` on stderr first: the huggingface_hub in use.
Usage: python -c "$(cat this_file)" MODE ARGS...
"""

import glob
import os
import sys

import huggingface_hub
from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoFile
from huggingface_hub.utils import HfHubHTTPError


def repo_files(api, repo, commit):
    return sorted((f.path, f.size) for f in api.list_repo_tree(repo, revision=commit, recursive=True)
                  if isinstance(f, RepoFile))


def size_of(path):
    try:
        return os.path.getsize(path)
    except OSError:
        return None


def need(api, repo, commit, root):
    files = repo_files(api, repo, commit)
    short = [(p, s) for p, s in files if size_of(os.path.join(root, p)) != s]
    partial = sum(size_of(p) or 0 for p in glob.glob(os.path.join(root, ".cache/huggingface/download/**/*.incomplete"),
                                                     recursive=True))
    rest = max(0, sum(s - min(size_of(os.path.join(root, p)) or 0, s) for p, s in short) - partial)
    top = root
    while not os.path.isdir(top) and top not in ("", "/"):
        top = os.path.dirname(top)
    st = os.statvfs(top or "/")
    print(f"disk\t{st.f_bavail * st.f_frsize}\t{rest}\t{len(short)}")
    return 0


def main(argv):
    api = HfApi()
    if argv[0] == "resolve":
        sha = api.model_info(argv[1], revision=argv[2]).sha
        repo_files(api, argv[1], sha)  # a gated repo's files: refused here without a granted token
        print(sha)
        return 0
    if argv[0] == "need":
        return need(api, *argv[1:4])
    repo, commit, root, record = argv[1:5]
    files = repo_files(api, repo, commit)
    bad = []
    for path, size in files:
        have = size_of(os.path.join(root, path))
        if have != size:
            bad.append(f"missing\t{path}\t{'none' if have is None else have}\t{size}")
    if bad or not files:
        print("\n".join(bad) or f"missing\t(no file listed for {repo}@{commit})\tnone\t?")
        return 1
    target = os.path.join(root, record)
    os.makedirs(os.path.dirname(target), exist_ok=True)
    with open(target + ".tmp", "w") as fh:
        fh.write(f"{repo}\t{commit}\n" + "".join(f"{size}\t{path}\n" for path, size in files))
    os.replace(target + ".tmp", target)
    print(f"recorded {len(files)} files of {repo} at {commit}")
    return 0


def refused(err):
    """The hub's answer, on one line: its error code, HTTP status and message."""
    resp = getattr(err, "response", None)
    headers = getattr(resp, "headers", None) or {}
    status = getattr(resp, "status_code", None) or "?"
    message = headers.get("X-Error-Message") or str(err).strip().splitlines()[0]
    text = " ".join(str(message).split())
    print(f"hub-refused\t{headers.get('X-Error-Code') or '-'}\t{status}\t{text}", file=sys.stderr)
    return 3


if __name__ == "__main__":
    print(f"hub-client\t{huggingface_hub.__version__}", file=sys.stderr)
    try:
        sys.exit(main(sys.argv[1:]))
    except HfHubHTTPError as exc:
        sys.exit(refused(exc))
