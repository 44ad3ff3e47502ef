"""python -m perfsight: the perfsight command."""
import sys

from .cli import main

sys.exit(main())
