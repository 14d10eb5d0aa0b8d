"""The users file (USERS_FILE) as the tests write it."""

from __future__ import annotations

import json
from pathlib import Path

from argon2 import PasswordHasher

from app.auth.users import HASHER


def write_users(path: Path, hasher: PasswordHasher = HASHER, **passwords: str) -> None:
    path.write_text(json.dumps({name: hasher.hash(pw) for name, pw in passwords.items()}))
