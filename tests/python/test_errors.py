# SPDX-License-Identifier: MIT
"""One style of error: a bad argument value is ArgumentError (ValueError and
OSError EINVAL) naming what was passed; messages say their reason once;
errors name the file, offset and size (and a batch's request)."""

import errno
import os
import subprocess
import sys

import pytest

from conftest import numpy


def test_bad_values_are_value_errors_naming_the_value(phx, make_blob, make_file):
    path, _ = make_blob(4096, 1)
    checkpoint = make_file("m.safetensors", {"a": numpy.zeros(4, dtype=numpy.float32)})
    cases = [
        (lambda: phx.File(path, "rw"), "'rw'"),
        (lambda: phx.File(path, direct="sometimes"), "'sometimes'"),
        (lambda: phx.File(path, direct=3), "3"),
        (lambda: phx.File(path, engine="warp"), "warp"),
        (lambda: phx.Device("gpu"), "gpu"),
        (lambda: phx.Device("cpu", engine="compat"), "compat"),
        (lambda: phx.Loader("cpu", cache="sometimes"), "'sometimes'"),
        (lambda: phx.Loader("cpu", engine=5), "5"),
        (lambda: phx.Loader("cpu", device_map=[1, 2]), "device_map"),
        (lambda: phx.load_safetensors(checkpoint, "cpu", framework="tf"), "'tf'"),
        (lambda: phx.safe_open(checkpoint, framework="tf"), "'tf'"),
        (lambda: phx.safe_open(checkpoint, framework="np", device="gpu"), "gpu"),
        (lambda: phx.Loader("cpu", chunk_size=-1), "chunk_size"),
        (lambda: phx.Options(copy_threads=0), "copy_threads"),
        (lambda: phx.Options(engine="warp"), "warp"),
    ]
    for call, word in cases:
        with pytest.raises(ValueError) as info:
            call()
        error = info.value
        assert isinstance(error, OSError) and error.errno == errno.EINVAL, error
        assert isinstance(error, phx.ArgumentError)
        assert word in str(error), (word, str(error))


def test_direct_takes_booleans(phx, make_blob):
    path, data = make_blob(4096, 2)
    with phx.File(path, direct=False) as f:
        assert not f.direct_io
    try:
        f = phx.File(path, direct=True)
    except OSError as error:   # a filesystem without O_DIRECT
        assert error.errno == errno.EINVAL and not isinstance(error, ValueError)
    else:
        with f:
            assert f.direct_io


def test_no_message_repeats_its_reason(phx, make_blob, tmp_path):
    path, _ = make_blob(4096, 3)
    errors = []
    with phx.File(path, "r") as f:
        with pytest.raises(OSError) as info:
            f.pwrite(numpy.ones(8, dtype=numpy.uint8))
        errors.append(info.value)
    with pytest.raises(OSError) as info:
        phx.File(tmp_path / "absent")
    errors.append(info.value)
    with pytest.raises(OSError) as info:
        phx.File(path, "x")
    errors.append(info.value)
    for error in errors:
        reason = os.strerror(error.errno)
        assert str(error).count(reason) <= 1, str(error)


def test_a_non_contiguous_buffer_names_file_offset_and_size(phx, make_blob):
    path, _ = make_blob(4096, 4)
    strided = numpy.zeros((8, 8), dtype=numpy.uint8)[:, ::2]
    with phx.File(path) as f:
        with pytest.raises(ValueError) as info:
            f.pread(strided, 16, 100)
    text = str(info.value)
    assert str(path) in text and "file offset 100" in text and "size 16" in text
    assert "contiguous" in text and info.value.errno == errno.EINVAL


def test_a_batch_error_names_its_request(phx, make_blob):
    path, _ = make_blob(4096, 5)
    buf = numpy.zeros(64, dtype=numpy.uint8)
    with phx.File(path) as f:
        with pytest.raises(ValueError, match="request 2") as info:
            f.pread_batch([(buf, 8, 0, 0), (buf, 8, 8, 8), (buf, 8, -5, 16)])
        assert "file offset -5" in str(info.value)
        with pytest.raises(TypeError, match="request 1"):
            f.pread_batch([(buf, 8, 0, 0), [buf]])
        strided = numpy.zeros((8, 8), dtype=numpy.uint8)[:, ::2]
        with pytest.raises(ValueError, match="request 1 .*contiguous"):
            f.pread_batch([(buf, 8, 0, 0), (strided,)])


def test_a_folder_is_not_a_file(phx, tmp_path):
    with pytest.raises(IsADirectoryError) as info:
        phx.File(tmp_path)
    assert str(tmp_path) in str(info.value)


@pytest.mark.parametrize("value", ["abc", "0", "-3", "2000"])
def test_bad_thread_count_variable_names_it(phx, make_blob, value):
    path, _ = make_blob(4096, 6)
    script = (
        "import errno, numpy, phoenix_gds as phx\n"
        f"f = phx.File({str(path)!r})\n"
        "try:\n"
        "    f.pread_async(numpy.zeros(8, dtype=numpy.uint8))\n"
        "except ValueError as e:\n"
        "    assert e.errno == errno.EINVAL and 'PHX_PY_THREADS' in str(e), e\n"
        "    print('refused')\n"
    )
    env = dict(os.environ, PHX_PY_THREADS=value)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0 and out.stdout.strip() == "refused", out.stderr
