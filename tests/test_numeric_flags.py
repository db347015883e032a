"""The shared numeric-flag check (issue 37): nan, inf, bools, strings, fractions where an
integer is needed and values out of range are refused with the flag's name."""

import math

import pytest

from bert_tf.data.numeric_flags import FlagValueError, check_number


@pytest.mark.parametrize("value, bounds, message", [
    (math.nan, {"above": 0}, "--x must be a finite number > 0, got nan"),
    (math.inf, {"above": 0}, "--x must be a finite number > 0, got inf"),
    (-math.inf, {}, "--x must be a finite number, got -inf"),
    (0, {"above": 0}, "--x must be a finite number > 0, got 0"),
    (-3, {"at_least": 1, "integer": True}, "--x must be an integer >= 1, got -3"),
    (1.5, {"integer": True}, "--x must be an integer, got 1.5"),
    (True, {}, "--x must be a finite number, got True"),
    ("3", {}, "--x must be a finite number, got '3'"),
    (1.0, {"at_least": 0, "below": 1}, r"--x must be a finite number in \[0, 1\), got 1.0"),
    (7, {"above": 0, "at_most": 6}, r"--x must be a finite number in \(0, 6\], got 7"),
])
def test_refused_values_name_the_flag_and_the_range(value, bounds, message):
    with pytest.raises(FlagValueError, match=f"^{message}$"):
        check_number("x", value, **bounds)


def test_accepted_values_are_returned_and_the_error_type_is_the_callers():
    assert check_number("x", 0.5, at_least=0, below=1) == 0.5
    assert check_number("x", 4.0, at_least=1, integer=True) == 4.0
    assert check_number("x", -2) == -2

    class CommandError(Exception):
        pass

    with pytest.raises(CommandError, match="--learning_rate"):
        check_number("learning_rate", math.nan, above=0, error=CommandError)
    with pytest.raises(TypeError):
        check_number("x", 1, at_least=0, above=0)
