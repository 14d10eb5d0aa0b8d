"""The settings: a pure, typed parse of the environment (``settings.py``), with what they
share with the rest of the service (the store URL, the username rule, the clock)."""
