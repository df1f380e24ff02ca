"""What the package's test programs share."""

import errno

import stitchfs


def fails_with(code, f, *args):
    """Calls ``f(*args)``, which must raise ``StitchError`` with errno
    ``code``: its message."""
    try:
        f(*args)
    except stitchfs.StitchError as e:
        assert e.errno == code, (e.errno, code, e)
        return str(e)
    raise AssertionError(f"{f.__name__} did not fail with {errno.errorcode[code]}")
