import sys

from attnlab.bench.cli import main

sys.exit(main())
