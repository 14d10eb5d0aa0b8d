"""The limits on logins and refreshes: per client address (``address.py``) and per
username (``login_failures.py``), both counted by the backend's counters."""
