"""Jupyter server configuration for the browser tests.

Never use it in production: it turns off authentication and exposes the app object.
"""

import atexit
import os
import shutil
from tempfile import mkdtemp

from jupyterlab.galata import configure_jupyter_server

configure_jupyter_server(c)  # noqa: F821 (c is the config object jupyter injects)

c.ServerApp.ip = "127.0.0.1"  # noqa: F821
c.ServerApp.port = int(os.environ["KPL_UI_PORT"])  # noqa: F821 (set by playwright.config.js)
c.ServerApp.allow_root = True  # noqa: F821
# The platform's database and storage live in a fresh folder, never in ~/.kpl-lab.
KPL_HOME = mkdtemp(prefix="kpl-ui-home-")
atexit.register(shutil.rmtree, KPL_HOME, ignore_errors=True)
c.Platform.home = KPL_HOME  # noqa: F821
