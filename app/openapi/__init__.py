"""The OpenAPI document, ``openapi.json``, as each app serves it (``document.py``)."""
