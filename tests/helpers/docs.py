"""The docs as the tests read them: a page's marked shell blocks."""

from __future__ import annotations

import re


def marked_block(text: str, name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n```sh\n(.*?)```\n<!-- {name}:end -->", text, re.S)
    assert match, f"no {name} block"
    return match.group(1)
