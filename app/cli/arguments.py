"""What the operator commands read, checked alike: arguments, and one line of standard input."""

from __future__ import annotations

import sys

import click


class InputError(click.ClickException):
    """Input the command cannot use: one line on standard error, exit status 2."""

    exit_code = 2


def valid_username(context: click.Context, parameter: click.Parameter, value: str) -> str:
    """Refuse a username the shell passed in bytes that are not UTF-8."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError:
        raise click.BadParameter("not valid UTF-8", context, parameter) from None
    return value


def read_one_line(what: str, limit: int) -> str:
    """Return the one line of standard input, without its line end, reading at most about
    ``limit`` characters; refuse input of more than one line, rather than drop the rest.

    The input is read to its end (a pipe's writer closes it), or to a few characters past
    ``limit``: a line longer than ``limit`` comes back cut short, longer than ``limit``
    all the same, for the caller to refuse.
    """
    text = sys.stdin.read(limit + 3)  # the line, its "\r\n", and one more: a second line
    line, newline, rest = text.partition("\n")
    if newline and rest:
        raise InputError(f"give {what} as one line on standard input; it has more than one")
    return line.removesuffix("\r") if newline else line
