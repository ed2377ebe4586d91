# Runs before SConstruct: make the checkout's nnbuild package importable even with -C / -u.
import os
import sys

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
if _ROOT not in sys.path:
    sys.path.insert(0, _ROOT)
