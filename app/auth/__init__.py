"""Who a caller is: access, cookie and refresh tokens, the signing keys and their files,
and the user directory. No Flask here: it runs in gunicorn's master and in commands too."""
