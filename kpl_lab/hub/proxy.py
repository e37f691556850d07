"""The hub's proxy: the Python configurable-http-proxy, answering a websocket's subprotocol.

Its handler is a tornado websocket handler that never selects a subprotocol, so a browser
asking for one (JupyterLab's kernel channels ask `v1.kernel.websocket.jupyter.org`) gets
none back, logs a failed handshake and connects again without. The target's own choice
(it is connected to first, with the browser's headers) is answered here instead.

    python -m kpl_lab.hub.proxy [configurable-http-proxy's options]
"""

from __future__ import annotations

import sys

from configurable_http_proxy.cli import main as proxy_main
from configurable_http_proxy.handlers import ProxyHandler


def select_subprotocol(handler: ProxyHandler, subprotocols: list[str]) -> str | None:
    """Return the subprotocol the target selected, when the browser offered it."""
    client = handler.ws_client
    chosen = client.selected_subprotocol if client is not None else None
    return chosen if chosen in subprotocols else None


def main() -> int | None:
    """Run configurable-http-proxy with the subprotocol answered."""
    ProxyHandler.select_subprotocol = select_subprotocol
    return proxy_main()


if __name__ == "__main__":
    sys.exit(main())
