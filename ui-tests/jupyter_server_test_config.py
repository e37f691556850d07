"""Jupyter server configuration for the browser tests.

Never use it in production: it turns off authentication and exposes the app object.
"""

import os

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821 (c is the config object jupyter injects)

c.ServerApp.ip = "127.0.0.1"  # noqa: F821
c.ServerApp.port = int(os.environ["KPL_UI_PORT"])  # noqa: F821 (set by playwright.config.js)
c.ServerApp.allow_root = True  # noqa: F821
