"""Typed errors. The CLI turns each into one line and an exit status."""

from typing import Any, TypeVar

from pydantic import BaseModel

from topologies.params import ParamError, clip, parse

M = TypeVar("M", bound=BaseModel)


class TestbedError(Exception):
    """Base of every error the testbed raises on purpose."""


class ConfigError(TestbedError):
    """Bad input: a scenario or parameter is malformed or impossible (exit status 2)."""

    def __init__(self, field: str, reason: str):
        # one line, a value quoted in it clipped
        field, reason = clip(str(field), 160), clip(str(reason), 400)
        super().__init__(f"{field}: {reason}")
        self.field = field
        self.reason = reason


class HostError(TestbedError):
    """The host cannot run what was asked (missing package, service not running)."""


class BringUpError(TestbedError):
    """The fabric, controller or traffic did not come up in time."""


class ServerAnswerError(BringUpError):
    """Another machine of a lab answered outside the lab's protocol (a file it was not
    asked for, a path out of the run's folders, an offset beyond what this machine holds,
    a payload over the bound): nothing of the answer is used, and that machine's part
    ends."""


class Interrupted(TestbedError):
    """The run was stopped by SIGINT or SIGTERM; teardown still runs."""


def parse_section(model: type[M], data: Any, where: str) -> M:
    """``data`` parsed with ``model`` (:func:`topologies.params.parse`); a
    :class:`ConfigError` naming the field otherwise."""
    try:
        return parse(model, data, where)
    except ParamError as exc:
        raise ConfigError(exc.field, exc.reason) from None
