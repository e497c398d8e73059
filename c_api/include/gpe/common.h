/* GroupPE's C ABI: what every area header shares. The export macros, the version, the
 * status codes and the per-thread error message, and the plane pairing of rotations
 * (SO(n) representations, RoPE, attention). One part of gpe/gpe.h, which states the
 * ABI's conventions: include gpe/gpe.h. Valid C99 (and C++) on its own.
 */
#ifndef GPE_COMMON_H_
#define GPE_COMMON_H_

#include <stddef.h>
#include <stdint.h>

#include <dlpack/dlpack.h>

#if defined(_WIN32)
#define GPE_API __declspec(dllexport)
#elif defined(__GNUC__) || defined(__clang__)
#define GPE_API __attribute__((visibility("default")))
#else
#define GPE_API
#endif

#if defined(__GNUC__) || defined(__clang__)
#define GPE_NODISCARD __attribute__((warn_unused_result))
#else
#define GPE_NODISCARD
#endif

#ifdef __cplusplus
extern "C" {
#endif

/* ---- Version ------------------------------------------------------------------- */

#define GPE_VERSION_MAJOR 0
#define GPE_VERSION_MINOR 10
#define GPE_VERSION_PATCH 0
/* MAJOR * 10000 + MINOR * 100 + PATCH; compare with gpe_version() at run time. */
#define GPE_VERSION_NUMBER \
  (GPE_VERSION_MAJOR * 10000 + GPE_VERSION_MINOR * 100 + GPE_VERSION_PATCH)

/* The GPE_VERSION_NUMBER the library was built with. */
GPE_API int gpe_version(void);
/* "MAJOR.MINOR.PATCH"; static storage, never NULL. */
GPE_API const char* gpe_version_string(void);

/* ---- Status and errors --------------------------------------------------------- */

typedef int32_t gpe_status;
enum {
  GPE_OK = 0,
  GPE_ERROR_INVALID_ARGUMENT = 1, /* a null pointer, a bad value, mismatched shapes */
  GPE_ERROR_OUT_OF_RANGE = 2,     /* a size or index outside what is representable */
  GPE_ERROR_UNSUPPORTED = 3,      /* a dtype, device or layout this build lacks */
  GPE_ERROR_OUT_OF_MEMORY = 4,
  GPE_ERROR_INTERNAL = 5,         /* a bug in GroupPE: please report the message */
  GPE_ERROR_VERSION_MISMATCH = 6  /* an option struct newer than this library */
};

/* The message of the last failing call on this thread ("" if none). Never NULL. */
GPE_API const char* gpe_last_error_message(void);
/* "GPE_OK", "GPE_ERROR_INVALID_ARGUMENT", ...; "GPE_ERROR_UNKNOWN" otherwise. */
GPE_API const char* gpe_status_name(gpe_status status);

/* ---- Plane pairing -----------------------------------------------------------------
 *
 * How rotary features pair into rotation planes: gpe_so_planes_options.pairing,
 * gpe_rope_options.pairing, gpe_attention_options.rope_pairing.
 */
enum {
  /* Pairs (2i, 2i + 1): RoFormer, GPT-J. */
  GPE_PAIRING_INTERLEAVED = 0,
  /* Pairs (i, i + rotary_dim / 2): GPT-NeoX, Llama. */
  GPE_PAIRING_HALF_SPLIT = 1
};

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_COMMON_H_ */
