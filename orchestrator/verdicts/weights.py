"""Why a weights download failed, as the error the operator acts on: the hub's refusal, a full disk, or the network.

Why: "check access to the model hub" is the right fix for a cut link only. A gated repo without a token, a token
without access, a token the hub does not know and a disk that filled up each need their own fix, and the
download's output says which it was (the weights probe's `hub-refused` line, ENOSPC, the `df` line). Pure.
"""

from __future__ import annotations

from dataclasses import dataclass

from orchestrator.errors import DeployError, DiskFull, HubRefused, RemoteError
from orchestrator.parsers.weights import DownloadOutput

#: Where the inventory takes the token from (docs/inventory.md, "hf_token").
TOKEN_FIX = ("set `hf_token: {file: /root/.config/deploy/hf-token}` (a 0600 file) or `hf_token: {env: HF_TOKEN}` in "
             "the profile or the host")


@dataclass(frozen=True)
class DownloadContext:
    """What the error names: the repo, where the weights go, the token's source (None: no token given)."""

    repo: str
    model_path: str
    token: str | None  # SecretRef.describe(): "file /path" or "env $NAME"
    endpoint: str | None
    host: str


def size_text(n: int) -> str:
    """Bytes for a person: 1.2 GiB, 340 MiB, 12 KiB."""
    for unit, size in (("TiB", 1 << 40), ("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.1f} {unit}"
    return f"{n} B"


def refusal_error(out: DownloadOutput, c: DownloadContext) -> HubRefused | None:
    """The hub's answer (401/403/404) as its own error, or None when the hub did not refuse."""
    r = out.refusal
    if r is None:
        return None
    hub = c.endpoint or "the model hub"
    said = f"{hub} answered {r.status}{'' if r.code == '-' else ' ' + r.code}: {r.message}"
    if r.code == "GatedRepo" and r.status == "401":
        what = f"{c.repo} is a gated model and the download sent no token ({said})"
        fix = (f"accept the model's terms on its page with your hub account, create a read token, then {TOKEN_FIX}; "
               "re-run `deploy up`")
        if c.token:
            what = f"{c.repo} is a gated model and the hub did not accept the token from {c.token} ({said})"
            fix = f"check that {c.token} holds the token itself (one line, `hf_…`), then re-run `deploy up`"
    elif r.code == "GatedRepo" and r.status == "403":
        what = f"the token from {c.token or 'the hub client'} has no access to the gated model {c.repo} ({said})"
        fix = (f"request access on the model's page ({c.endpoint or 'https://huggingface.co'}/{c.repo}) with the "
               "token's account and "
               "wait for the grant, or give a token of an account that has it; re-run `deploy up`")
    elif r.status == "401" and r.code == "-":
        what = f"the hub does not know the token from {c.token or 'the hub client'} ({said})"
        fix = f"create a new read token on the hub and put it in {c.token or 'hf_token'}; re-run `deploy up`"
    elif r.code == "RepoNotFound":
        what = f"{c.repo} was not found on {hub}, or it is private ({said})"
        fix = ("check profiles.<name>.weights_repo (owner/name, as on the model's page); for a private model "
               + (f"check that the token from {c.token} has read access to it" if c.token else TOKEN_FIX))
    elif r.code == "RevisionNotFound":
        what = f"{c.repo} has no such revision ({said})"
        fix = "set profiles.<name>.weights_revision to a branch, tag or commit of the repo (default main)"
    else:
        what = f"the model hub refused the download of {c.repo} ({said})"
        fix = "check access to the model hub from the container (container.hf_endpoint names a mirror)"
    return HubRefused(f"weights download refused: {what}; nothing was downloaded", fix=fix, host=c.host,
                      details={"hub_status": r.status, "hub_error": r.code})


def disk_full_error(out: DownloadOutput, c: DownloadContext) -> DiskFull | None:
    """A download the disk stopped, naming the filesystem (its df line) and the space the rest needs."""
    d = out.disk
    if d is None or not out.disk_full:
        return None
    df = f"`{d.df_line}`" if d.df_line else f"{size_text(d.free_bytes)} free"
    return DiskFull(
        f"the disk under {c.model_path} filled up during the weights download: {df}; the rest of the download "
        f"({d.files} file(s)) needs {size_text(d.need_bytes)}, {size_text(d.free_bytes)} is free",
        fix=(f"make room for at least {size_text(max(0, d.need_bytes - d.free_bytes))} more on that filesystem "
             "(delete what else lies there, grow the container's disk: container.rootfs_size_gb, or put the weights "
             "on host storage: container.model_mount), then re-run `deploy up`: it finishes the download, keeping "
             "the files already complete; the server is not started on partial weights"),
        host=c.host, details={"free_bytes": d.free_bytes, "need_bytes": d.need_bytes, "df": d.df_line})


def xet_error(out: DownloadOutput, c: DownloadContext, left: str) -> RemoteError | None:
    """A download whose Xet transfer failed (hf_xet already retried): the hub answered, its storage did not."""
    if not out.xet_error:
        return None
    return RemoteError(
        f"weights download failed in its Xet transfer (hf_xet fetches the files from the hub's Xet storage, not "
        f"from the hub itself): {out.xet_error[-300:]}; the weights at {c.model_path} are incomplete{left}",
        fix=("the container must reach the hub's Xet storage too: the CAS URL the hub's xet-read-token answer "
             "names and the xorb URLs that CAS hands out (on huggingface.co: cas-server.xethub.hf.co and "
             "*.xethub.hf.co, which a proxy or firewall that lets only huggingface.co through blocks; a mirror in "
             "container.hf_endpoint must serve its own); hf_xet gave up after its own retries; "
             "re-running `deploy up` finishes the download (files already complete are kept); the server is not "
             "started on partial weights"),
        host=c.host, details={"cause": "xet-transfer"})


def download_error(out: DownloadOutput, c: DownloadContext, summary: str, left: str = "") -> DeployError:
    """The error of a failed download: the hub's refusal, a full disk, a failed Xet transfer, else the network
    (`summary`: what is left and the tail of the output; `left`: what is left alone)."""
    return (refusal_error(out, c) or disk_full_error(out, c) or xet_error(out, c, left)
            or RemoteError(f"weights download failed; the weights at {c.model_path} are incomplete{summary}",
                           fix="check access to the model hub from the container (container.hf_endpoint names a "
                               "mirror); re-running `deploy up` finishes the download (files already complete are "
                               "kept); the server is not started on partial weights", host=c.host))
