"""`python -m nnbuild.runners build-harness -o PATH`: same CLI as nnbuild.runners.simavr."""

import sys

from nnbuild.runners.simavr import main

sys.exit(main())
