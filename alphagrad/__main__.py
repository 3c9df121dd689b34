import sys

from alphagrad.cli import main

sys.exit(main())
