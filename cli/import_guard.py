"""Keeping pandas and numpy out of a one-shot command's process.

pyarrow loads them on its own when they are installed, though meltwater hands it neither
pandas objects nor numpy arrays:
- numpy as `pyarrow.lib` loads (an optional import, for its numpy conversions): 0.04 s of
  imports and 0.12 s of a small `changes` command's CPU (the bench's 0.1% UPDATE, 5M rows,
  from the console script), in an environment where pandas pulled numpy in;
- pandas the first time `pa.array` is given a Python sequence (its `_is_array_like`
  check, to tell a pandas Series from a list), with numpy: 0.3 s.

So the console script's one-shot commands (`scan`, `changes`, `plan`, `snapshots`,
`version`) make both unimportable before they run: pyarrow then treats them as absent, as
where they are not installed. A process that has loaded either already is left as it is,
and so is any process but the console script's (a test, a notebook, a service, a Spark
worker), since the guard is never removed once set.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from types import ModuleType

GUARDED = ("pandas", "numpy")


class ImportGuard:
    """A meta path finder refusing `import pandas`, `import numpy` and their submodules
    with an ImportError saying why (a finder needs only `find_spec`; importlib.abc's base
    class would cost its import)."""

    def find_spec(self, fullname: str, path: Sequence[str] | None,  # noqa: ARG002
                  target: ModuleType | None = None,  # noqa: ARG002
                  ) -> ModuleSpec | None:
        """Refuse the guarded libraries; leave every other module to the finders after this
        one."""
        if fullname.partition(".")[0] in GUARDED:
            raise ImportError(f"{fullname} is not loaded by meltwater's one-shot commands "
                              "(see meltwater.cli.import_guard)", name=fullname)
        return None


def keep_pandas_and_numpy_out() -> bool:
    """Make pandas and numpy unimportable in this process, unless either is loaded already;
    whether the guard is (now) in place."""
    if any(name in sys.modules for name in GUARDED):
        return False
    if not any(isinstance(finder, ImportGuard) for finder in sys.meta_path):
        sys.meta_path.insert(0, ImportGuard())
    return True
