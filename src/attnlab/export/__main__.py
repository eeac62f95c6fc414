"""``python -m attnlab.export``."""

from attnlab.export import main

raise SystemExit(main())
