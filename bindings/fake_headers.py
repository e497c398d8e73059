"""A small gpe.h for the drift checks' tests: an umbrella over two per-area headers (as
c_api/include/gpe/ is laid out), a DLPack header and an exported-symbol list.

It has each construct the checks compare: scalars (int32_t, int64_t, double, uint32_t,
gpe_status), const and mutable pointers, an opaque handle and its out-parameter
(gpe_so_rep**), an option struct with a 'double lo, hi' pair, a callback typedef used as
a field, a char* return, and DLTensor with its nested structs.
"""
import os
import tempfile

COMMON_H = """\
/* Versions, status codes, callbacks. */
#ifndef GPE_COMMON_H_
#define GPE_COMMON_H_
#include <stdint.h>
#include <dlpack/dlpack.h>
#define GPE_API __attribute__((visibility("default")))
#define GPE_NODISCARD __attribute__((warn_unused_result))
typedef int32_t gpe_status;
enum { GPE_OK = 0, GPE_ERROR_INVALID_ARGUMENT = 1 };
GPE_API const char* gpe_version_string(void);
typedef void (*gpe_progress_callback)(void* user_data, int64_t step, double loss);
#endif
"""

SO_H = """\
#ifndef GPE_SO_H_
#define GPE_SO_H_
#include "gpe/common.h"
typedef struct gpe_so_rep gpe_so_rep;
typedef struct gpe_so_options {
  uint32_t struct_size; /* sizeof(gpe_so_options) */
  int32_t pairing;
  double lo, hi;
  const double* thetas;
  gpe_progress_callback progress;
  void* progress_user_data;
} gpe_so_options;
#define GPE_SO_OPTIONS_INIT \\
  { (uint32_t)sizeof(gpe_so_options), 0, 0.0, 1.0, NULL, NULL, NULL }
GPE_API GPE_NODISCARD gpe_status gpe_so_create(const gpe_so_options* options,
                                               gpe_so_rep** out);
GPE_API void gpe_so_destroy(gpe_so_rep* rep);
GPE_API GPE_NODISCARD gpe_status gpe_so_apply(const gpe_so_rep* rep, int64_t position,
                                              const DLTensor* x, DLTensor* out);
#endif
"""

GPE_H = """\
/* The umbrella: every area's header. */
#ifndef GPE_GPE_H_
#define GPE_GPE_H_
#include "gpe/common.h"
#include <gpe/so.h>
#ifdef __cplusplus
extern "C" {
#endif
#ifdef __cplusplus
}
#endif
#endif
"""

DLPACK_H = """\
#include <stdint.h>
typedef enum { kDLCPU = 1 } DLDeviceType;
typedef struct {
  DLDeviceType device_type;
  int device_id;
} DLDevice;
typedef struct {
  uint8_t code;
  uint8_t bits;
  uint16_t lanes;
} DLDataType;
typedef struct {
  void* data;
  DLDevice device;
  int ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;
  uint64_t byte_offset;
} DLTensor;
"""

EXPORTED = ["gpe_so_apply", "gpe_so_create", "gpe_so_destroy", "gpe_version_string"]


class FakeHeaders:
    """The files in a temporary directory: .gpe_h, .dlpack_h, .symbols (paths) and
    .dir; write(name, text) adds or replaces one; cleanup() removes them."""

    def __init__(self, common_h=COMMON_H, so_h=SO_H, gpe_h=GPE_H):
        self._tmp = tempfile.TemporaryDirectory()
        self.dir = self._tmp.name
        self.gpe_h = self.write("c_api/include/gpe/gpe.h", gpe_h)
        self.write("c_api/include/gpe/common.h", common_h)
        self.write("c_api/include/gpe/so.h", so_h)
        self.dlpack_h = self.write("dlpack/include/dlpack/dlpack.h", DLPACK_H)
        self.symbols = self.write("exported_symbols.txt",
                                  "# exported\n" + "".join(s + "\n" for s in EXPORTED))

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def cleanup(self):
        self._tmp.cleanup()
