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

#endif  // GPE_BUILD_DEFS_TARGET_CLONES_H_
