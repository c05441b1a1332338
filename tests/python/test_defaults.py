# SPDX-License-Identifier: MIT
"""phoenix_gds.defaults takes kvikio.defaults' calls, new (get/set) and old
(compat_mode(), num_threads_reset()...), over the process's phx::Options:
what they read is the PHX_* environment, what they set is what the next
engine and CuFile take."""

import errno
import os
import subprocess
import sys

import pytest

# kvikio name: (Options field, a value to set, its value in Options)
FIELDS = {
    "num_threads": ("copy_threads", 5, 5),
    "task_size": ("copy_chunk", 192 << 10, 192 << 10),
    "bounce_buffer_size": ("staging_bytes", 1 << 20, 1 << 20),
}


@pytest.fixture
def defaults(phx):
    """phx.defaults, with the process defaults put back after the test."""
    before = phx.Options.defaults()
    threshold = phx.defaults.get("gds_threshold")
    yield phx.defaults
    phx.Options.set_defaults(before)
    phx.defaults.set("gds_threshold", threshold)


@pytest.mark.parametrize("name", sorted(FIELDS))
def test_each_setting_is_its_options_field(phx, defaults, name):
    field, value, in_options = FIELDS[name]
    old = defaults.get(name)
    assert old == getattr(phx.Options.defaults(), field)
    assert getattr(defaults, name)() == old                    # the old getter
    with defaults.set(name, value):
        assert defaults.get(name) == value
        assert getattr(phx.Options.defaults(), field) == in_options
        assert getattr(phx.Options(), field) == in_options    # new Options start there
    assert defaults.get(name) == old                           # the with block restored it
    getattr(defaults, f"{name}_reset")(value)                  # kvikio's older setter
    assert defaults.get(name) == value
    with getattr(defaults, f"set_{name}")(old):                # and its older context
        assert defaults.get(name) == old
    assert defaults.get(name) == value
    defaults.set({name: old})                                  # set alone sets
    assert defaults.get(name) == old
    for bad in (0, -1, "8", 1.5):
        with pytest.raises(ValueError, match=name) as info:
            defaults.set(name, bad)
        assert info.value.errno == errno.EINVAL
    assert defaults.get(name) == old


def test_num_threads_aliases_and_bad_names(phx, defaults):
    assert defaults.get("thread_pool_nthreads") == defaults.get("num_threads")
    with defaults.set({"thread_pool_nthreads": 3, "task_size": 64 << 10}):
        assert defaults.num_threads() == 3 and defaults.task_size() == 64 << 10
    for bad in (("nope",), ("nope", 1), (1, 2, 3), ([],)):
        with pytest.raises(ValueError):
            defaults.set(*bad)
    with pytest.raises(ValueError, match="nope"):
        defaults.get("nope")
    # A value out of Options' range names both names and changes nothing.
    with pytest.raises(ValueError, match="task_size.*copy_chunk"):
        defaults.set("task_size", 2 << 30)
    assert phx.Options.defaults().copy_chunk == defaults.task_size()


def test_gds_threshold_is_kept(defaults):
    assert defaults.gds_threshold() == 16 << 10   # kvikio's default
    with defaults.set_gds_threshold(0):
        assert defaults.get("gds_threshold") == 0
    defaults.gds_threshold_reset(1 << 20)
    assert defaults.get("gds_threshold") == 1 << 20
    with pytest.raises(ValueError):
        defaults.set("gds_threshold", -1)


def test_compat_mode_is_the_default_engine(phx, defaults):
    CompatMode = phx.CompatMode
    assert phx.defaults.CompatMode is CompatMode and int(CompatMode.AUTO) == 2
    for mode, engine in ((CompatMode.ON, "compat"), (CompatMode.OFF, "direct"),
                         (CompatMode.AUTO, "auto")):
        with defaults.set("compat_mode", mode):
            assert defaults.compat_mode() is mode
            assert phx.Options.defaults().engine == engine
            if mode != CompatMode.AUTO:
                assert defaults.is_compat_mode_preferred() == (mode == CompatMode.ON)
    for spelling, mode in (("on", CompatMode.ON), ("OFF", CompatMode.OFF), (True, CompatMode.ON),
                           (False, CompatMode.OFF), (1, CompatMode.ON), ("auto", CompatMode.AUTO)):
        defaults.compat_mode_reset(spelling)
        assert defaults.get("compat_mode") is mode
    with defaults.set_compat_mode(CompatMode.ON):
        assert defaults.compat_mode() is CompatMode.ON
    assert defaults.compat_mode() is CompatMode.AUTO
    # cufile is GPU Direct Storage too: OFF; host is POSIX: ON.
    for engine, mode in (("cufile", CompatMode.OFF), ("host", CompatMode.ON)):
        phx.Options.set_defaults(phx.Options(engine=engine))
        assert defaults.compat_mode() is mode
    with pytest.raises(ValueError, match="compat_mode"):
        defaults.set("compat_mode", "sometimes")


def test_the_environment_is_what_they_read(tmp_path):
    import phoenix_gds

    # The child runs elsewhere: the package is found where this one was.
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(phoenix_gds.__file__)))
    env = dict(os.environ, PHX_ENGINE="compat", PHX_COPY_THREADS="7", PHX_COPY_CHUNK="1M",
               PHX_STAGING_SIZE="2M",
               PYTHONPATH=os.pathsep.join(filter(None, [package_root,
                                                        os.environ.get("PYTHONPATH")])))
    code = ("import phoenix_gds as phx; d = phx.defaults; "
            "print(d.compat_mode().name, d.num_threads(), d.get('task_size'), "
            "d.get('bounce_buffer_size'), d.is_compat_mode_preferred())")
    run = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         timeout=60, cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["ON", "7", str(1 << 20), str(2 << 20), "True"]
