"""Misspelled settings: an environment variable that nearly matches a setting's name.

A misspelled setting would be ignored, and the service would start on the default
(``SIGNING_SECERT`` set, a generated secret used), so such a variable stops the start
instead. A variable that is not a setting counts as near one when either:

- it starts with a setting family's prefix (``SIGNING``, ``TOKEN_STORE``,
  ``ACCESS_TOKEN``, ``REFRESH_TOKEN``, ``COOKIE_TOKEN``, ``AUTH_COOKIE``,
  ``RATE_LIMIT``, ``LOGIN_FAILURE``, ``TRUSTED_PROX``, ``OIDC_``), unless it is an
  ``OIDC_<NAME>_ISSUER``/``_CLIENT_ID``/``_CLIENT_SECRET``/``_SCOPES``/``_ADMIN_GROUPS``/
  ``_ADMIN_SUBJECTS``/``_ADMIN_EMAILS`` provider variable;
- or it is 8 characters or longer and at most 2 edits (a letter added, dropped,
  changed, or two neighbours swapped) from a setting's name of 8 characters or longer.

Names are compared in capitals, so ``signing_secret`` is near ``SIGNING_SECRET``.
Variables Kubernetes sets for each service (``<NAME>_SERVICE_HOST``,
``<NAME>_SERVICE_PORT...``, ``<NAME>_PORT...``) never count: a service may be called
``token-store``.
"""

from __future__ import annotations

import difflib
import functools
import re
from collections.abc import Iterable

#: The prefixes only this service's settings start with.
FAMILY_PREFIXES = (
    "ACCESS_TOKEN",
    "AUTH_COOKIE",
    "COOKIE_TOKEN",
    "LOGIN_FAILURE",
    "OIDC_",
    "RATE_LIMIT",
    "REFRESH_TOKEN",
    "SIGNING",
    "TOKEN_STORE",
    "TRUSTED_PROX",
)
#: Names shorter than this are compared by their prefix only: short names are too alike.
MIN_COMPARED_LENGTH = 8
#: Most edits between a misspelled name and the setting's.
MAX_EDITS = 2
PROVIDER_SUFFIXES = (
    "ISSUER",
    "CLIENT_ID",
    "CLIENT_SECRET",
    "SCOPES",
    "ADMIN_GROUPS",
    "ADMIN_SUBJECTS",
    "ADMIN_EMAILS",
)
PROVIDER_SETTING = re.compile(rf"OIDC_[A-Z0-9_]+_({'|'.join(PROVIDER_SUFFIXES)})")
#: What Kubernetes sets for every service in a pod's namespace (service links).
SERVICE_LINK = re.compile(
    r"[A-Z0-9_]+_(SERVICE_HOST|SERVICE_PORT(_[A-Z0-9_]+)?|PORT(_\d+_(TCP|UDP|SCTP)(_[A-Z]+)?)?)"
)


def resembled_setting(name: str, settings: Iterable[str]) -> str | None:
    """Return the setting that ``name``, which is not one, looks like a misspelling of, or None."""
    return _resembled_setting(name, tuple(sorted(settings)))


@functools.lru_cache(maxsize=1024)
def _resembled_setting(name: str, known: tuple[str, ...]) -> str | None:
    """``resembled_setting``, kept per name: the environment is read by every app built."""
    if name in known:
        return None
    name = name.upper()  # signing_secret is SIGNING_SECRET mistyped
    if name in known:
        return name
    if PROVIDER_SETTING.fullmatch(name) or SERVICE_LINK.fullmatch(name):
        return None
    if len(name) >= MIN_COMPARED_LENGTH:
        near = [
            setting
            for setting in known
            if len(setting) >= MIN_COMPARED_LENGTH
            and abs(len(setting) - len(name)) <= MAX_EDITS  # else more edits: not compared
            and edits(name, setting, MAX_EDITS) <= MAX_EDITS
        ]
        if near:
            return min(near, key=lambda setting: edits(name, setting))
    family = next((prefix for prefix in FAMILY_PREFIXES if name.startswith(prefix)), None)
    if family is None:
        return None
    rest = name.removeprefix(family)
    if family == "OIDC_" and "_" in rest and not rest.startswith("PROVIDER"):
        # OIDC_<NAME>_<SUFFIX>, the name itself perhaps with an underscore
        candidates = [
            f"OIDC_{rest.rsplit('_', cut)[0]}_{suffix}"
            for cut in (1, 2, 3)
            if rest.count("_") >= cut
            for suffix in PROVIDER_SUFFIXES
        ]
        return min(candidates, key=lambda candidate: edits(name, candidate))
    relatives = [setting for setting in known if setting.startswith(family)]
    return difflib.get_close_matches(name, relatives, n=1, cutoff=0)[0]


def edits(first: str, second: str, limit: int | None = None) -> int:
    """Return the optimal string alignment distance: insertions, deletions, substitutions and
    swaps of two neighbours, each one edit; past ``limit``, any number above it."""
    previous: list[int] = []
    row = list(range(len(second) + 1))
    for i, left in enumerate(first, 1):
        before, previous, row = previous, row, [i] + [0] * len(second)
        for j, right in enumerate(second, 1):
            row[j] = min(
                previous[j] + 1,
                row[j - 1] + 1,
                previous[j - 1] + (left != right),
            )
            if i > 1 and j > 1 and left == second[j - 2] and first[i - 2] == right:
                row[j] = min(row[j], before[j - 2] + 1)
        if limit is not None and min(row) > limit and min(previous) > limit:
            return limit + 1  # every alignment already costs more: no row ends lower
    return row[-1]
