// GPE_TARGET_CLONES(...): GCC / clang's target_clones attribute (one function compiled
// for each listed target, the loader's resolver picking one at start-up), except under
// ThreadSanitizer: it instruments the clones' resolvers, which the loader runs before the
// sanitizer's runtime starts (a crash at load time); that build keeps the baseline clone.
#ifndef GPE_BUILD_DEFS_TARGET_CLONES_H_
#define GPE_BUILD_DEFS_TARGET_CLONES_H_

#if defined(__SANITIZE_THREAD__)  // GCC
#define GPE_TSAN_BUILD 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)  // clang
#define GPE_TSAN_BUILD 1
#endif
#endif
#if defined(GPE_TSAN_BUILD)
#define GPE_TARGET_CLONES(...)
#else
#define GPE_TARGET_CLONES(...) __attribute__((target_clones(__VA_ARGS__)))
#endif

// GPE_CLONE_AVX2_FMA: the clone for AVX2 with FMA. GCC takes "arch=x86-64-v3" (a string
// "avx2,fma" would make two clones, AVX2 without FMA and FMA without AVX2); clang before
// 18 mishandles arch= in target_clones (LLVM issue 55830), so there it is "avx2".
#if defined(__clang__) && __clang_major__ < 18
#define GPE_CLONE_AVX2_FMA "avx2"
#else
#define GPE_CLONE_AVX2_FMA "arch=x86-64-v3"
#endif

#endif  // GPE_BUILD_DEFS_TARGET_CLONES_H_
