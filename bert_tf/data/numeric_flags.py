"""The one check of a numeric flag that every command uses: finite, in range, an integer where
it counts. absl parses `--learning_rate=nan` and `--shard_mb=inf` as floats without a word;
`nan <= 0` is False, so a plain `if value <= 0` check lets them through.

    check_number("learning_rate", config.learning_rate, above=0, error=ConfigError)
    check_number("max_seq_length", config.max_seq_length, at_least=3, integer=True)
"""

import math
import numbers


class FlagValueError(ValueError):
    """A numeric flag value the command cannot use; the message names the flag."""


def check_number(flag, value, *, at_least=None, above=None, at_most=None, below=None,
                 integer=False, error=FlagValueError):
    """Raises `error` naming --flag unless `value` is a finite number within the bounds.

    Args:
      flag: the flag's name, without dashes (it goes into the message as --flag).
      value: the parsed value (int or float; a bool or a string is refused).
      at_least, above: lower bound, inclusive or exclusive (give at most one).
      at_most, below: upper bound, inclusive or exclusive (give at most one).
      integer: whether the value must be a whole number (1.0 passes, 1.5 does not).
      error: the exception class to raise (the command's own error type, so its entry point
        prints the message instead of a traceback); FlagValueError by default.

    Returns:
      value, unchanged.
    """
    kind = "an integer" if integer else "a finite number"
    wanted = " ".join([kind, *_bounds_text(at_least, above, at_most, below)])
    if (isinstance(value, bool) or not isinstance(value, numbers.Real)
            or not math.isfinite(value) or (integer and value != int(value))
            or not _within(value, at_least, above, at_most, below)):
        raise error(f"--{flag} must be {wanted}, got {value!r}")
    return value


def _bounds_text(at_least, above, at_most, below) -> list:
    if None not in (at_least, above) or None not in (at_most, below):
        raise TypeError("give at most one lower bound (at_least/above) and one upper bound "
                        "(at_most/below)")
    if at_least is not None and at_most is not None:
        return [f"in [{at_least}, {at_most}]"]
    if at_least is not None and below is not None:
        return [f"in [{at_least}, {below})"]
    if above is not None and at_most is not None:
        return [f"in ({above}, {at_most}]"]
    if above is not None and below is not None:
        return [f"in ({above}, {below})"]
    single = {">=": at_least, ">": above, "<=": at_most, "<": below}
    return [f"{op} {bound}" for op, bound in single.items() if bound is not None]


def _within(value, at_least, above, at_most, below) -> bool:
    return ((at_least is None or value >= at_least) and (above is None or value > above)
            and (at_most is None or value <= at_most) and (below is None or value < below))
