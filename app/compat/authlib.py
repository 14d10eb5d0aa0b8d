"""What the service relies on in Authlib beyond its public API.

The session keys under which its Flask client keeps pending logins, read to bound the
login-state cookie. Its public side is relied on too: the keywords a login is saved
with (``save_authorize_data``) come back from ``framework.get_state_data``, which is how
the return URL rides with the login's state (app/oidc/flow.py).

tests/unit/test_compat.py checks each assumption against the installed release.
"""

from __future__ import annotations

from collections.abc import MutableMapping
from typing import Any

#: The distribution and the release (major.minor) whose internals were checked.
DISTRIBUTION = "Authlib"
CHECKED_VERSION = "1.9"

#: Authlib's Flask client keeps each pending login in the session under
#: ``_state_<provider>_<state>``, its value a dict whose ``exp`` is a Unix time.
PENDING_LOGIN_PREFIX = "_state_"


def pending_login_key(provider: str, state: str | None) -> str:
    """Return the session key of ``provider``'s pending login of ``state``."""
    return f"{PENDING_LOGIN_PREFIX}{provider}_{state}"


def forget_old_pending_logins(session: MutableMapping[str, Any], keep: int) -> None:
    """Drop all but the ``keep`` newest pending logins (of any provider) from ``session``."""
    pending = sorted(
        (key for key in session if key.startswith(PENDING_LOGIN_PREFIX)),
        key=lambda key: session[key].get("exp", 0) if isinstance(session[key], dict) else 0,
    )
    for key in pending[: max(0, len(pending) - keep)]:
        session.pop(key)
