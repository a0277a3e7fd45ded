"""Whose container a VMID names: the mark deploy puts on every container it creates (issue 50 item 12).

Why: `vmid: auto` records the VMID it chose on the node, and PVE gives the lowest free ID to the next container
anyone creates. After a `pct destroy` of ours, the recorded number can name somebody else's guest, and the
container step would pass 8 GPUs into it and restart it. So every container deploy creates carries a PVE tag
(`tags`, pve-tag-list: "only meta information", /nodes/{node}/lxc POST and …/config PUT in the PVE API schema) that
names the inventory host it was made for, and the container step reads it before it converges an existing one:
- the host's own mark: ours;
- another inventory host's mark: refused (two hosts name one container);
- no mark, `vmid: auto`: refused (the recorded number may have been reused);
- no mark, a VMID the inventory names: the operator chose that container; it is adopted and the mark added.
Pure: the config's `tags` string in, a verdict out.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from typing import Literal

#: deploy's tags: `deploy-` and 12 hex digits of the inventory host's name (PVE tags allow [a-z0-9_+.-]).
TAG_PREFIX = "deploy-"
_TAG = re.compile(r"deploy-[0-9a-f]{12}")


def ownership_tag(host_name: str) -> str:
    return TAG_PREFIX + hashlib.sha256(host_name.encode()).hexdigest()[:12]


def tags_of(value: object) -> list[str]:
    """PVE's tag list (`a;b`, also `,` or spaces) as a list, in order, without empties."""
    return [t for t in re.split(r"[;, ]+", str(value or "").strip()) if t]


def with_tag(value: object, tag: str) -> str:
    """The tag list with `tag` added (the others kept, in order)."""
    tags = tags_of(value)
    return ";".join(tags if tag in tags else [*tags, tag])


@dataclass(frozen=True)
class Ownership:
    verdict: Literal["ours", "adopt", "foreign"]
    why: str = ""


def judge_ownership(tags: object, host_name: str, *, vmid_auto: bool) -> Ownership:
    found = tags_of(tags)
    mine = ownership_tag(host_name)
    if mine in found:
        return Ownership("ours")
    others = [t for t in found if _TAG.fullmatch(t)]
    if others:
        return Ownership("foreign", f"it carries another inventory host's mark ({', '.join(others)}), not "
                                    f"{host_name}'s ({mine})")
    if vmid_auto:
        return Ownership("foreign", f"it carries no mark of deploy's ({mine}): PVE gives a destroyed container's "
                                    "VMID to the next container anyone creates, so the recorded `vmid: auto` may "
                                    "name somebody else's")
    return Ownership("adopt", f"the inventory names this VMID; the mark {mine} is added")
