"""The soak: hours of an operator's bad day, in minutes (``make soak``; docs/soak.md).

A bounded, mixed load through nginx, configured by the shipped site config, to the
service under gunicorn, on SQLite and again on Redis, while workers are killed, gunicorn
reloads, the signing key rotates and Redis restarts; then every promise is checked by a
rule (checks.py) and the run is written up in bench/results/ with a chart (report.py).
"""
