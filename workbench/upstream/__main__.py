"""`python -m workbench.upstream survey|replay`."""

import sys

from .cli import main

sys.exit(main())
