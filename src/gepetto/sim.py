"""Moved to `gepetto.testing.sim`; this name stays importable (`from gepetto import sim`) for code written before."""

import sys

from gepetto.testing import sim

sys.modules[__name__] = sim
