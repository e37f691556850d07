"""`python -m kpl_lab.cli`."""

import sys

from . import main

sys.exit(main())
