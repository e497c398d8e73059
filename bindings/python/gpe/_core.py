"""Library handle, errors and version (internal)."""

from gpe import _ffi

_lib = None


def lib():
    global _lib
    if _lib is None:
        _lib = _ffi.load_library()
    return _lib


class GpeError(RuntimeError):
    """A GroupPE call failed. `status` is the gpe_status name, str() the message."""

    def __init__(self, status, message):
        super().__init__(message)
        self.status = status


def check(code):
    if code != 0:
        l = lib()
        raise GpeError(l.gpe_status_name(code).decode(), l.gpe_last_error_message().decode())


def version():
    """(major, minor, patch) of the loaded library."""
    v = lib().gpe_version()
    return (v // 10000, (v // 100) % 100, v % 100)


def version_string():
    return lib().gpe_version_string().decode()
