"""``harness site``: a static results site (leaderboards, run pages, graded samples) from the results records.

``build_site(paths, out)`` writes it (harness/site/build.py); ``serve(out)`` serves it on localhost. The numbers come
from ``harness.results`` (collection, leaderboard records), never from a second computation; docs/site.md.
"""

from .build import build_site
from .serve import serve

__all__ = ["build_site", "serve"]
