"""`python -m admin`: the admin CLI."""

import sys

from admin.cli import main

sys.exit(main())
