"""Small helpers several built-in tasks share."""

from __future__ import annotations

import json
import re
from typing import Any


def parse_json_object(output: Any) -> dict[str, Any] | None:
    """The JSON object in an answer (from the first '{' to the last '}'; code fences allowed), or None."""
    m = re.search(r"\{.*\}", str(output or ""), re.S)
    if not m:
        return None
    try:
        value = json.loads(m.group(0))
    except json.JSONDecodeError:
        return None
    return value if isinstance(value, dict) else None
