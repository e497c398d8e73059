"""Compiler flags shared by every GroupPE C++ target (one place to change them)."""

GPE_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wshadow=local",
    "-Wnon-virtual-dtor",
    "-Werror",
]

# Tests may use gtest macros that trip a few extra warnings.
GPE_TEST_COPTS = GPE_COPTS + ["-Wno-sign-compare"]
