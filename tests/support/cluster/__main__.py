import sys

from tests.support.cluster.cli import main

sys.exit(main())
