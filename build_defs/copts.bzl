"""Compiler flags shared by every GroupPE C++ target (one place to change them)."""

GPE_COPTS = [
    "-Wall",
    "-Wextra",
    "-Wshadow=local",
    "-Wnon-virtual-dtor",
    "-Werror",
]

# Tests (and their test_util libraries) may use gtest macros that trip a few extra
# warnings. They compile at -O1 whatever the build's level: the code under test is the
# libraries', compiled at the build's level (-O2 under opt), while the tests' own sources
# (gtest cases, Eigen references, reference loops) were 2,040 of the 4,320 s of compiling
# in a cold `bazel test //...` on 2 cores; -O1 compiles them ~25% faster
# (attention/reference_test.cc: 98 s at -O2, 74 s at -O1) and runs them fast enough.
# Under --config=sanitize every source is -O1 already. At -O1 GCC 12 reports Eigen's
# dynamic-size copies inside gtest bodies as maybe-uninitialized (group/unipotent_test.cc:
# a VectorXd copy-constructed from an expression), a false positive -O2's inlining does
# not reach; tests leave that one warning out, the libraries keep it.
GPE_TEST_COPTS = GPE_COPTS + [
    "-Wno-sign-compare",
    "-Wno-maybe-uninitialized",
    "-O1",
]
