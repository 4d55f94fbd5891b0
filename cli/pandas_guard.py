"""Keeping pandas out of a one-shot command's process.

pyarrow asks whether pandas is installed the first time `pa.array` is given a Python
sequence (its `_is_array_like` check, to tell a pandas Series from a list), and answers by
importing it, with numpy: a large share of a one-shot command's whole run (compare
`python -c "import pyarrow as pa; pa.array([1])"` with and without pandas installed).
meltwater never hands pandas
objects to pyarrow, so the console script's one-shot commands (`scan`, `changes`, `plan`,
`snapshots`, `version`) make pandas unimportable before they run: pyarrow then treats it
as absent, as where it is not installed. A process that has loaded pandas already is left
as it is, and so is any process but the console script's (a test, a notebook, a service,
a Spark worker) since the guard is never removed once set.
"""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
from types import ModuleType

_GUARDED = "pandas"


class PandasGuard(importlib.abc.MetaPathFinder):
    """Refuses `import pandas` (and its submodules) with an ImportError saying why."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,  # noqa: ARG002
                  target: ModuleType | None = None,  # noqa: ARG002
                  ) -> importlib.machinery.ModuleSpec | None:
        """Refuse pandas; leave every other module to the finders after this one."""
        if fullname == _GUARDED or fullname.startswith(_GUARDED + "."):
            raise ImportError(f"{fullname} is not loaded by meltwater's one-shot commands "
                              "(see meltwater.cli.pandas_guard)", name=fullname)
        return None


def keep_pandas_out() -> bool:
    """Make pandas unimportable in this process, unless it is loaded already; whether the
    guard is (now) in place."""
    if _GUARDED in sys.modules:
        return False
    if not any(isinstance(finder, PandasGuard) for finder in sys.meta_path):
        sys.meta_path.insert(0, PandasGuard())
    return True
