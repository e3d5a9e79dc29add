"""The two kinds of failure `kvtk` reports in one line, as exception types code raises where it knows which it is.

- `BadInput`: the input was wrong (a field, a name, a file's content, a server's refusal of a request). `kvtk`
  prints one line naming the field and the value and exits 2. A `ValueError`, so callers that catch ValueError
  still do; but a plain ValueError is not bad input: raised deep in the code it is a bug and keeps its traceback.
- `RunFailed`: the input was fine and the run could not finish (a scheduler that stopped scheduling, a server that
  stopped answering, a refused device-cache reset). `kvtk` prints one line and exits 1, no traceback: the line
  says what stopped, and the traceback would only show where the watch noticed it.

Imports nothing: every package may raise these (the core's parsers of user-given specs included).
"""

from __future__ import annotations


class BadInput(ValueError):
    """Input that is refused: the message names the field (or file and line) and the value."""


class RunFailed(Exception):
    """A run that could not finish for a reason outside the code: the message says what stopped and where."""
