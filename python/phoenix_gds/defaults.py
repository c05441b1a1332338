# SPDX-License-Identifier: MIT
"""``phoenix_gds.defaults``: kvikio.defaults' calls over the process defaults
of libphoenix (``phx::Options``, docs/configuration.md).

Each kvikio setting is one Options field, read from its ``PHX_*`` variable
and changed for the engines set up from then on:

==================== ============================ ==========================
kvikio name          Options field (variable)     meaning here
==================== ============================ ==========================
compat_mode          engine (PHX_ENGINE)          ON: compat, OFF: direct,
                                                  AUTO: auto
num_threads          copy_threads                 threads moving a compat
                     (PHX_COPY_THREADS)           device's bytes
task_size            copy_chunk (PHX_COPY_CHUNK)  CuFile's task; a compat
                                                  chunk
bounce_buffer_size   staging_bytes                each I/O thread's host
                     (PHX_STAGING_SIZE)           bounce buffer
gds_threshold        (this module only)           kept for kvikio code;
                                                  unused
==================== ============================ ==========================

``set`` returns a context manager that puts the old values back at the end
of a ``with`` block; called alone it just sets.  A change lets the engines
that nothing holds go (:func:`phoenix_gds.release_idle_engines`), so the
next I/O sets one up with the new values; a Device or registration still
open keeps its engine as it was.
"""

from __future__ import annotations

import enum
import errno
import threading
from typing import Any, Callable, Dict, Tuple, Union

from ._phoenix import ArgumentError, Options, engine_for, release_idle_engines

__all__ = [
    "CompatMode", "get", "set", "is_compat_mode_preferred",
    "compat_mode", "compat_mode_reset", "set_compat_mode",
    "num_threads", "num_threads_reset", "set_num_threads",
    "task_size", "task_size_reset", "set_task_size",
    "gds_threshold", "gds_threshold_reset", "set_gds_threshold",
    "bounce_buffer_size", "bounce_buffer_size_reset", "set_bounce_buffer_size",
]


class CompatMode(enum.IntEnum):
    """kvikio.CompatMode: OFF uses the direct engine (GPU Direct Storage
    through phxfs; an I/O fails where it cannot), ON the compat engine
    (POSIX reads into pinned memory, then copies), AUTO the engine libphoenix
    detects (direct where phxfs serves the GPU, else compat)."""

    OFF = 0
    ON = 1
    AUTO = 2


_ENGINE_OF_MODE = {CompatMode.OFF: "direct", CompatMode.ON: "compat", CompatMode.AUTO: "auto"}
# cufile is GPU Direct Storage too; host moves host memory with POSIX calls.
_MODE_OF_ENGINE = {"direct": CompatMode.OFF, "cufile": CompatMode.OFF, "compat": CompatMode.ON,
                   "host": CompatMode.ON, "auto": CompatMode.AUTO}
# KVIKIO_COMPAT_MODE's spellings.
_MODE_NAMES = {"on": CompatMode.ON, "true": CompatMode.ON, "yes": CompatMode.ON,
               "1": CompatMode.ON, "off": CompatMode.OFF, "false": CompatMode.OFF,
               "no": CompatMode.OFF, "0": CompatMode.OFF, "auto": CompatMode.AUTO}

_lock = threading.Lock()
_gds_threshold = 16 << 10  # kvikio's default


def _compat_mode_arg(value: Any) -> CompatMode:
    if isinstance(value, bool):
        return CompatMode.ON if value else CompatMode.OFF
    if isinstance(value, int) and value in CompatMode._value2member_map_:
        return CompatMode(value)
    if isinstance(value, str) and value.strip().lower() in _MODE_NAMES:
        return _MODE_NAMES[value.strip().lower()]
    raise ArgumentError(errno.EINVAL, f"compat_mode {value!r}: expected CompatMode.ON, OFF or "
                                      "AUTO (or on/off/auto, True/False)")


def at_least(name: str, least: int) -> Callable[[Any], int]:
    """A check that a value named ``name`` is an integer >= ``least``."""
    def check(value: Any) -> int:
        if isinstance(value, bool) or not isinstance(value, int) or value < least:
            raise ArgumentError(errno.EINVAL, f"{name} {value!r}: expected an integer >= {least}")
        return value
    return check


def _set_option(name: str, field: str) -> Callable[[Any], None]:
    def apply(value: Any) -> None:
        options = Options.defaults()
        try:
            setattr(options, field, value)
            Options.set_defaults(options)  # validated there
        except ArgumentError as error:
            raise ArgumentError(errno.EINVAL, f"{name} {value!r} (Options.{field}): "
                                              f"{error.strerror or error}") from error
    return apply


def _set_threshold(value: int) -> None:
    global _gds_threshold
    _gds_threshold = value


_Setting = Tuple[Callable[[], Any], Callable[[Any], Any], Callable[[Any], None]]


def _size_field(name: str, field: str) -> _Setting:
    """A positive number that is the Options field ``field``."""
    return (lambda: getattr(Options.defaults(), field), at_least(name, 1),
            _set_option(name, field))


# name: (getter, argument check, setter)
_SETTINGS: Dict[str, _Setting] = {
    "compat_mode": (lambda: _MODE_OF_ENGINE[Options.defaults().engine], _compat_mode_arg,
                    lambda mode: _set_option("compat_mode", "engine")(_ENGINE_OF_MODE[mode])),
    "num_threads": _size_field("num_threads", "copy_threads"),
    "task_size": _size_field("task_size", "copy_chunk"),
    "bounce_buffer_size": _size_field("bounce_buffer_size", "staging_bytes"),
    "gds_threshold": (lambda: _gds_threshold, at_least("gds_threshold", 0), _set_threshold),
}
_ALIASES = {"thread_pool_nthreads": "num_threads"}


def _setting(name: Any) -> str:
    key = _ALIASES.get(name, name) if isinstance(name, str) else None
    if key not in _SETTINGS:
        raise ArgumentError(errno.EINVAL, f"setting {name!r}: expected one of "
                                          f"{', '.join(sorted(_SETTINGS))}")
    return key


def get(name: str) -> Any:
    """The value of a setting: ``get("compat_mode")``, ``get("task_size")``..."""
    return _SETTINGS[_setting(name)][0]()


class _Restore:
    """Sets values at once; a ``with`` block puts the old ones back at its end."""

    def __init__(self, values: Dict[str, Any]) -> None:
        checked = {_setting(k): _SETTINGS[_setting(k)][1](v) for k, v in values.items()}
        with _lock:
            self._old = {k: _SETTINGS[k][0]() for k in checked}
            _apply(checked)

    def __enter__(self) -> None:
        return None

    def __exit__(self, *exc: Any) -> bool:
        with _lock:
            _apply(self._old)
        return False


def _apply(values: Dict[str, Any]) -> None:
    for key, value in values.items():
        _SETTINGS[key][2](value)
    release_idle_engines()


def set(*config: Any) -> _Restore:  # noqa: A001 - kvikio's name
    """Sets settings: ``set("task_size", 1 << 20)`` or ``set({"compat_mode": CompatMode.ON,
    "num_threads": 8})``.  Returns a context manager that restores the old
    values at the end of a ``with`` block."""
    if len(config) == 1 and isinstance(config[0], dict):
        return _Restore(config[0])
    if len(config) == 2 and isinstance(config[0], str):
        return _Restore({config[0]: config[1]})
    raise ArgumentError(errno.EINVAL, "expected set(config: dict) or set(name: str, value)")


def is_compat_mode_preferred() -> bool:
    """True when new files move CUDA memory with the compat engine: compat
    mode ON, or AUTO where no GPU has the direct engine."""
    mode = get("compat_mode")
    if mode != CompatMode.AUTO:
        return mode == CompatMode.ON
    try:
        return engine_for("cuda:0") not in ("direct", "cufile")
    except OSError:  # no CUDA GPU
        return True


# kvikio's older calls, which code written for kvikio before 25.04 still makes.
def compat_mode() -> CompatMode:
    """get("compat_mode")."""
    return get("compat_mode")


def compat_mode_reset(mode: Union[CompatMode, bool, str]) -> None:
    """set("compat_mode", mode)."""
    set("compat_mode", mode)


def set_compat_mode(mode: Union[CompatMode, bool, str]) -> _Restore:
    """set("compat_mode", mode): sets it, and restores it after a ``with`` block."""
    return set("compat_mode", mode)


def num_threads() -> int:
    """get("num_threads")."""
    return get("num_threads")


def num_threads_reset(nthreads: int) -> None:
    """set("num_threads", nthreads)."""
    set("num_threads", nthreads)


def set_num_threads(nthreads: int) -> _Restore:
    """set("num_threads", nthreads), restored after a ``with`` block."""
    return set("num_threads", nthreads)


def task_size() -> int:
    """get("task_size")."""
    return get("task_size")


def task_size_reset(nbytes: int) -> None:
    """set("task_size", nbytes)."""
    set("task_size", nbytes)


def set_task_size(nbytes: int) -> _Restore:
    """set("task_size", nbytes), restored after a ``with`` block."""
    return set("task_size", nbytes)


def gds_threshold() -> int:
    """get("gds_threshold")."""
    return get("gds_threshold")


def gds_threshold_reset(nbytes: int) -> None:
    """set("gds_threshold", nbytes)."""
    set("gds_threshold", nbytes)


def set_gds_threshold(nbytes: int) -> _Restore:
    """set("gds_threshold", nbytes), restored after a ``with`` block."""
    return set("gds_threshold", nbytes)


def bounce_buffer_size() -> int:
    """get("bounce_buffer_size")."""
    return get("bounce_buffer_size")


def bounce_buffer_size_reset(nbytes: int) -> None:
    """set("bounce_buffer_size", nbytes)."""
    set("bounce_buffer_size", nbytes)


def set_bounce_buffer_size(nbytes: int) -> _Restore:
    """set("bounce_buffer_size", nbytes), restored after a ``with`` block."""
    return set("bounce_buffer_size", nbytes)

