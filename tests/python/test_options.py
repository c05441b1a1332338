# SPDX-License-Identifier: MIT
"""phoenix_gds.Options: keyword construction from the process defaults,
ranges checked with the field named, the environment read once per process,
and a Device sized by the options its engine was first opened with."""

import errno
import os
import subprocess
import sys
import textwrap

import pytest


def test_defaults_and_fields(phx):
    o = phx.Options()
    assert o == phx.Options.defaults()
    assert o.queue_depth >= 1 and o.copy_threads >= 1
    changed = phx.Options(copy_threads=3, staging_bytes=64 << 10, engine="host")
    assert (changed.copy_threads, changed.staging_bytes, changed.engine) == (3, 64 << 10, "host")
    assert changed != o
    assert "copy_threads=3" in repr(changed)
    changed.validate()


@pytest.mark.parametrize("field,value", [
    ("queue_depth", 0), ("queue_depth", 40000), ("staging_bytes", 100),
    ("copy_depth", 1), ("stream_workers", 0), ("copy_chunk", 2 << 30),
    ("copy_threads", -1), ("stream_workers", 1 << 40), ("staging_bytes", 1 << 64),
    ("copy_spin_us", 10001), ("stream_lanes", 0), ("stream_lanes", 65)])
def test_out_of_range_names_the_field(phx, field, value):
    with pytest.raises(OSError) as info:
        phx.Options(**{field: value})
    assert info.value.errno == errno.EINVAL
    assert field in str(info.value)


def test_fields_take_integers_only(phx):
    o = phx.Options()
    for value in (1.5, "4", None):
        with pytest.raises(TypeError, match="copy_threads"):
            o.copy_threads = value
    o.copy_threads = True  # an int, as Python has it
    assert o.copy_threads == 1


def test_unknown_field_and_engine(phx):
    with pytest.raises(TypeError, match="unknown field"):
        phx.Options(threads=4)
    with pytest.raises(OSError) as info:
        phx.Options(engine="warp-drive")
    assert info.value.errno == errno.EINVAL


def run_fresh(code, **env):
    """Runs code in a new interpreter (the environment is read once per process)."""
    full = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path), **env)
    done = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=full,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


def test_environment_read_once(phx):
    out = run_fresh("""
        import os, phoenix_gds as phx
        first = phx.Options()
        os.environ["PHX_QUEUE_DEPTH"] = "9"
        print(first.queue_depth, phx.Options().queue_depth,
              phx.Options.from_environment().queue_depth, first.copy_threads)
    """, PHX_QUEUE_DEPTH="7", PHX_COPY_THREADS="5")
    assert out.split() == ["7", "7", "9", "5"]


def test_device_keeps_its_options_and_refuses_others(phx, tmp_path):
    numpy = pytest.importorskip("numpy")
    data = numpy.random.default_rng(5).integers(0, 256, 3 << 20, dtype=numpy.uint8)
    path = tmp_path / "blob.bin"
    data.tofile(path)
    out = run_fresh(f"""
        import errno, numpy, phoenix_gds as phx
        opts = phx.Options(staging_bytes=8 << 10, queue_depth=4)
        dev = phx.Device("cpu", options=opts)
        assert dev.options == phx.Options(staging_bytes=8 << 10, queue_depth=4, engine="host")
        buf = numpy.zeros(3 << 20, dtype=numpy.uint8)
        with phx.File({str(path)!r}) as f:
            # Misaligned for O_DIRECT: bounced in 8 KiB steps.
            assert f.pread(buf[1:], (3 << 20) - 1, 1) == (3 << 20) - 1
        want = numpy.fromfile({str(path)!r}, dtype=numpy.uint8)
        assert (buf[1:] == want[1:]).all()
        assert phx.Device("cpu").options == dev.options  # shares what is open
        try:
            phx.Device("cpu", options=phx.Options(queue_depth=8))
        except OSError as e:
            assert e.errno == errno.EBUSY, e
            print("busy")
    """)
    assert out.split() == ["busy"]
