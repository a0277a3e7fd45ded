"""A short digest of a canonical flag set: what reports show beside each release id to tell flag sets apart."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any


def flags_sha(values: Mapping[str, Any]) -> str:
    """A short, stable digest of a canonical flag set (what the report shows beside each release id)."""
    return hashlib.sha256(json.dumps(dict(values), sort_keys=True, default=str).encode()).hexdigest()[:12]
