"""The gateway's access rules (ACCESS_RULES_FILE): the file, how a path and a host are read,
and the judging of the original request a proxy asks about.

Nothing here knows Flask: ``app.views.gateway`` reads the request and answers, and
``flask rules check`` judges from the command line. Rules are checked and compiled once,
when the file is read.
"""
