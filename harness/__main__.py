"""``python -m harness``: the tools' command line (:mod:`harness.tools.cli`)."""

import sys

from harness.tools.cli import main

sys.exit(main())
