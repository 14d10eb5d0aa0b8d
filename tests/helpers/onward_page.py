"""The page a third-party login's callback answers to send the browser back where it started."""

from __future__ import annotations

import html
import re

REFRESH = re.compile(r"""<meta http-equiv="refresh" content="0;url='([^"']*)'">""")
LINK = re.compile(r'<a href="([^"]*)">Continue</a>')


def onward_url(page: str) -> str:
    """Return the URL the page refreshes to, checking that its link names the same one."""
    refresh, link = REFRESH.search(page), LINK.search(page)
    assert refresh is not None, page
    assert link is not None, page
    assert refresh.group(1) == link.group(1)
    return html.unescape(refresh.group(1))
