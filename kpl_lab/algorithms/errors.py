"""Problems found in an algorithm, reported all at once with where they are."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong: the field path, what is wrong, and the file position when known."""

    path: str
    message: str
    file: str | None = None
    line: int | None = None
    column: int | None = None

    def __str__(self) -> str:
        text = f"{self.path}: {self.message}" if self.path else self.message
        if self.file is None:
            return text
        where = self.file
        if self.line is not None:
            where += f":{self.line}"
            if self.column is not None:
                where += f":{self.column}"
        return f"{text} ({where})"


class AlgorithmError(ValueError):
    """An algorithm (or its parameters) is invalid; `problems` lists every problem found."""

    def __init__(self, problems: list[Problem] | Problem | str):
        if isinstance(problems, str):
            problems = Problem("", problems)
        if isinstance(problems, Problem):
            problems = [problems]
        self.problems: list[Problem] = list(problems)
        super().__init__(self._summary())

    def _summary(self) -> str:
        if len(self.problems) == 1:
            return str(self.problems[0])
        lines = [f"{len(self.problems)} problems:"]
        lines += [f"  - {problem}" for problem in self.problems]
        return "\n".join(lines)


class ParameterError(AlgorithmError):
    """Parameters or overrides do not match the algorithm's parameter.yml."""


class ArchiveError(AlgorithmError):
    """An uploaded archive or folder is unsafe or unreadable."""


class EnvironmentBuildError(RuntimeError):
    """Building the environment from `image.runs` failed; the message ends with the log's last lines."""

    def __init__(self, message: str, log_path: str, log_tail: list[str]):
        self.log_path = log_path
        self.log_tail = log_tail
        tail = "\n".join(f"  | {line}" for line in log_tail)
        super().__init__(
            f"{message} (full log: {log_path})\n{tail}" if tail else f"{message} (full log: {log_path})"
        )
