"""One check for numeric flags, shared by the commands: a value must be a finite number in
its allowed range, or the command stops with an error that names the flag, the value and the
range. absl's DEFINE_float accepts nan and inf and its lower_bound/upper_bound cannot express
an open interval such as (0, 1], so each command lists its numeric fields' ranges here
(e.g. bert_tf/tools/estimate.py NUMERIC_FLAGS) and calls check_numbers on its config.
"""

import dataclasses
import math
from collections.abc import Mapping


class NumericFlagError(ValueError):
    """A numeric flag out of range, nan or infinite; the message names the flag."""


@dataclasses.dataclass(frozen=True)
class Range:
    """Allowed values: finite numbers from `low` to `high`, each end open or closed."""

    low: float = -math.inf
    high: float = math.inf
    low_open: bool = False
    high_open: bool = False
    integer: bool = False

    def contains(self, value) -> bool:
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return False
        if not math.isfinite(value) or (self.integer and value != int(value)):
            return False
        above = value > self.low if self.low_open else value >= self.low
        below = value < self.high if self.high_open else value <= self.high
        return above and below

    def describe(self) -> str:
        kind = "an integer" if self.integer else "a finite number"
        if self.high == math.inf:
            return f"{kind} {'>' if self.low_open else '>='} {self.low:g}"
        return (f"{kind} in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}"
                f"{')' if self.high_open else ']'}")


POSITIVE = Range(0, low_open=True)
NON_NEGATIVE = Range(0)
AT_LEAST_ONE = Range(1, integer=True)
FRACTION = Range(0, 1, low_open=True)  # (0, 1]: an efficiency, a probability to keep


def check_number(flag: str, value, allowed: Range, where: str = "") -> None:
    """Raises NumericFlagError unless `value` is None (not given) or in `allowed`.

    Args:
      flag: the flag's name, without dashes.
      value: its value.
      allowed: the Range it must be in.
      where: a prefix naming where the value came from (e.g. "--recipe=x.flags: ").
    """
    if value is not None and not allowed.contains(value):
        raise NumericFlagError(f"{where}--{flag}={value!r}: must be {allowed.describe()}")


def check_numbers(config, ranges: Mapping[str, Range], where: str = "") -> None:
    """check_number on each field of `config` (a dataclass or a mapping) named in `ranges`."""
    for flag, allowed in ranges.items():
        value = config.get(flag) if isinstance(config, Mapping) else getattr(config, flag)
        check_number(flag, value, allowed, where)
