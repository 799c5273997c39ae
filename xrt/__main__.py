"""`python -m xrt ...` is the `xrt` command line."""

import sys

from .cli import main

sys.exit(main())
