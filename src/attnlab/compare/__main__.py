"""``python -m attnlab.compare``."""

from attnlab.compare import main

raise SystemExit(main())
