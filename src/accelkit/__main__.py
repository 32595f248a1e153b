import sys

from accelkit.cli import main

sys.exit(main())
