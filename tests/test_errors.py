"""meltwater's errors: one module per layer defines them, all are `MeltwaterError`s (so the
CLI prints their one line and exits 2, the service reports them), and their names end in
`Error`. The exceptions to the last two are listed with their reason."""

from __future__ import annotations

import importlib
import pkgutil

import pytest

import meltwater.cli
import meltwater.output
import meltwater.planner
import meltwater.service
import meltwater.sinks
import meltwater.stream
from meltwater.planner.errors import MeltwaterError

# Not errors: a signal turned into an exception, like KeyboardInterrupt.
NOT_ERRORS = {"meltwater.cli.signals.Terminated"}
# Where each layer's errors live.
ERROR_MODULES = {
    "meltwater.planner": "meltwater.planner.errors",
    "meltwater.stream": "meltwater.stream.errors",
    "meltwater.output": "meltwater.output.errors",
    "meltwater.sinks": "meltwater.sinks.errors",
    "meltwater.service": "meltwater.service.errors",
    "meltwater.cli": "meltwater.cli.options",
}


def _exception_classes() -> dict[str, type[BaseException]]:
    found: dict[str, type[BaseException]] = {}
    for package in (meltwater.planner, meltwater.stream, meltwater.output, meltwater.sinks,
                    meltwater.service, meltwater.cli):
        for info in pkgutil.walk_packages(package.__path__, package.__name__ + "."):
            if info.name.startswith("meltwater.stream.spark"):
                continue  # imports pyspark; its one private exception is checked by ruff N818
            module = importlib.import_module(info.name)
            for value in vars(module).values():
                if (isinstance(value, type) and issubclass(value, BaseException)
                        and value.__module__ == info.name):
                    found[f"{info.name}.{value.__name__}"] = value
    return found


CLASSES = _exception_classes()


def test_the_walk_finds_the_errors():
    assert "meltwater.planner.errors.NoSuchTableError" in CLASSES
    assert "meltwater.sinks.errors.NullKeyError" in CLASSES
    assert len(CLASSES) > 30


@pytest.mark.parametrize("name", sorted(set(CLASSES) - NOT_ERRORS))
def test_every_error_is_a_meltwater_error_named_error(name):
    cls = CLASSES[name]
    assert issubclass(cls, MeltwaterError), f"{name} escapes MeltwaterError (and exit status 2)"
    assert cls.__name__.endswith("Error"), f"{name}: name it ...Error"


@pytest.mark.parametrize("name", sorted(set(CLASSES) - NOT_ERRORS))
def test_each_layer_defines_its_errors_in_one_module(name):
    layer = next(prefix for prefix in ERROR_MODULES if name.startswith(prefix + "."))
    module = name.rsplit(".", 1)[0]
    assert module == ERROR_MODULES[layer], f"{name}: define it in {ERROR_MODULES[layer]}"


def test_one_class_per_error_name():
    names = [cls.__name__ for cls in CLASSES.values()]
    assert len(names) == len(set(names)), sorted(n for n in names if names.count(n) > 1)
