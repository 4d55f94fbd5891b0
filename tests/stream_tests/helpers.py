"""What the output writers' tests here still import by the bare name `helpers`: the engine
tests' file builders moved to `engine_tests.helpers` (issue 24). Goes when these tests move
to the output package's own test folder and import `engine_tests.helpers` themselves."""

from engine_tests.helpers import F

__all__ = ["F"]
