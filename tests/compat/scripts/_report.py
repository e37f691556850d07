"""Collect what a comparison script observed and print it as one JSON object.

The same script runs under the original packages and under ours; the test compares the
two reports. Every observation is either
- {"value": ...}: must be equal (bytes as {"$bytes": base64}, tuples as lists);
- {"error": {...}}: ours must be an instance of the original's exception class, and both
  messages must contain the gist, when one is given.
"""

from __future__ import annotations

import base64
import json

MARKER = "KPL-COMPAT-REPORT "  # the original logs to stdout too: the report is the line starting with this
_results: dict = {}


def plain(value):
    """Return value as JSON-ready data."""
    if isinstance(value, bytes):
        return {"$bytes": base64.b64encode(value).decode()}
    if isinstance(value, dict):
        return {str(k): plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    return value


def value(name, value):
    """Record a value both packages must give."""
    _results[name] = {"value": plain(value)}


def call(name, function, gist=None):
    """Record what function() returns, or the error it raises."""
    try:
        result = function()
    except Exception as error:
        _results[name] = {
            "error": {
                "type": type(error).__name__,
                "mro": [c.__name__ for c in type(error).__mro__],
                "message": str(error),
                "gist": gist,
            }
        }
    else:
        _results[name] = {"value": plain(result)}


def done():
    """Print the report on one line after the marker."""
    print(MARKER + json.dumps(_results, sort_keys=True, ensure_ascii=False), flush=True)
