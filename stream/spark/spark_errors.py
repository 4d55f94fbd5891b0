"""What pyspark's exceptions say: their whole text, and whether Spark refused the plan.

A query that fails reaches its caller as one of pyspark's captured exceptions
(`AnalysisException`, `StreamingQueryException`, ...) or as py4j's `Py4JJavaError` around
a Java exception. Their `str()` is a summary; the Java stack trace with its causes, which
names the exception that really failed (a meltwater error raised in a Spark Python worker,
a Hadoop exception), is in members of their own. `meltwater.service.failures` reads the
text these give to judge a failure.
"""

from __future__ import annotations


def error_text(error: BaseException) -> str:
    """All the text an error carries: its message and, for pyspark's captured exceptions,
    the JVM stack trace with its causes."""
    parts = [str(getattr(error, "desc", None) or error)]
    stack = getattr(error, "_stackTrace", None) or getattr(error, "stackTrace", None)
    if isinstance(stack, str):
        parts.append(stack)
    return "\n".join(parts)


def is_analysis_error(error: BaseException) -> bool:
    """Whether `error` is pyspark's AnalysisException: Spark refuses the query's plan, and
    will again."""
    from pyspark.errors import AnalysisException

    return isinstance(error, AnalysisException)


__all__ = ["error_text", "is_analysis_error"]
