"""Run INSIDE the container with the venv's python (huggingface_hub 1.x): the hub's side of the weights check.

`resolve REPO REVISION`: prints the commit the revision names now, so the download and its record agree.
`record REPO COMMIT DIR RECORD`: lists every file of that commit with its size (the hub's file tree), checks each
in DIR and writes DIR/RECORD (REPO<TAB>COMMIT, then SIZE<TAB>PATH lines) only when every one is there with its
size; otherwise prints `missing<TAB>PATH<TAB>HAVE<TAB>WANT` for each that is not and exits 1.
Usage: python -c "$(cat this_file)" MODE ARGS...
"""

import os
import sys

from huggingface_hub import HfApi
from huggingface_hub.hf_api import RepoFile


def main(argv):
    api = HfApi()
    if argv[0] == "resolve":
        print(api.model_info(argv[1], revision=argv[2]).sha)
        return 0
    repo, commit, root, record = argv[1:5]
    files = sorted((f.path, f.size) for f in api.list_repo_tree(repo, revision=commit, recursive=True)
                   if isinstance(f, RepoFile))
    bad = []
    for path, size in files:
        try:
            have = str(os.path.getsize(os.path.join(root, path)))
        except OSError:
            have = "none"
        if have != str(size):
            bad.append(f"missing\t{path}\t{have}\t{size}")
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


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
