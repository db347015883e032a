"""One line of the doctor's report: a check's status, what it found and the fix."""

import dataclasses

OK, WARN, FAIL = "OK", "WARN", "FAIL"


@dataclasses.dataclass
class Check:
    status: str
    name: str
    message: str
    fix: str = ""

    def line(self) -> str:
        text = f"{self.status:<4} {self.name}: {self.message}"
        if self.fix and self.status != OK:
            text += f" | fix: {self.fix}"
        return text
