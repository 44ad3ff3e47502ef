"""python -m perfsight: the perfsight command."""
import sys

from perfsight.cli import main

sys.exit(main())
