import sys

from harness.devicecheck.core import main

sys.exit(main())
