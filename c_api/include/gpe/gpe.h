/* GroupPE: positional encodings as group representations. The stable C ABI.
 *
 * Conventions (fixed for the life of the ABI):
 * - Every function that can fail returns a gpe_status; GPE_OK (0) is success. The
 *   numeric values of the codes never change. After a failure,
 *   gpe_last_error_message() returns a message for the calling thread; it is never
 *   NULL and stays valid until the next failing call on that thread.
 * - No C++ exception crosses this boundary.
 * - Objects are opaque handles made by gpe_*_create* and released by gpe_*_destroy;
 *   destroy(NULL) does nothing. A handle is immutable after creation, so one handle
 *   may be used from many threads at once.
 * - Option structs begin with `struct_size`, which the caller sets to sizeof the
 *   struct it was compiled against (the *_INIT macros do so). Fields are only ever
 *   appended; the library accepts any size from the first version's up to its own.
 * - Tensors are DLPack DLTensors (dlpack/dlpack.h, DLPack 0.6 layout) on the CPU
 *   (kDLCPU), except where an entry point says otherwise (attention and RoPE also take
 *   kDLCUDA: gpe/attention.h, "CUDA TENSORS"; gpe/rope.h). `strides` are in elements;
 *   strides == NULL means row-major compact.
 *   Positions are int64 ids; frequencies and scales are passed as double.
 * - Rotations: a plane pair (x1, x2) at position p with frequency theta becomes
 *   (x1 cos a - x2 sin a, x1 sin a + x2 cos a), a = p * theta, with p * theta formed
 *   exactly and reduced mod 2 pi in double before cos and sin (accurate at any int64
 *   position).
 * - Symbols are exported only through GPE_API; everything else in the shared library
 *   is hidden.
 * - Thread safety: every function may be called from any number of threads at once.
 *   The library's only process-wide state is its thread pool (gpe/thread_pool.h: the
 *   built-in workers, or the pool the application installed); it never changes the
 *   environment or other libraries' settings. Handles are immutable, so calls may share
 *   a handle and read-only inputs, and give the same bits as when made one at a time
 *   (no work split depends on timing; the INR solvers' BLAS follows its own thread
 *   setting, e.g. OPENBLAS_NUM_THREADS). Output tensors and a handle being destroyed
 *   must not be in use by another call. The error message is per thread.
 *   Tested by c_api/thread_safety_test.cc.
 *
 * The declarations sit in one header per area, each valid C99 on its own; include this
 * one, which includes them all:
 *   gpe/common.h        export macros, version, status codes, error message, plane pairing
 *   gpe/so.h            SO(n) representations of the integers
 *   gpe/sequence.h      sinusoidal and learned absolute encodings, GRAPE-M
 *   gpe/algebraic.h     algebraic encodings: sequences, trees, grids, periodic domains,
 *                       locality scaling
 *   gpe/relative.h      Shaw et al.'s relative labels, Transformer-XL's relative terms
 *   gpe/rope.h          rotary position embeddings
 *   gpe/bias.h          additive attention biases: ALiBi, T5, FoX, GRAPE-AP, GRAPE-A
 *   gpe/coordinate.h    shifted bases, coordinate encoders, graph encodings
 *   gpe/analysis.h      embedder analysis: stable rank, distance preservation
 *   gpe/inr.h           INR least-squares fits over a fixed encoding
 *   gpe/inr_training.h  INR training by Adam: a ReLU network, the linear layer
 *   gpe/inr_data.h      INR data, splits and error metrics
 *   gpe/image.h         PNG and JPEG files
 *   gpe/attention.h     attention with the positional encoding inside the kernel
 *   gpe/thread_pool.h   the thread pool of every threaded call: the library's or the
 *                       application's own (gpe_set_thread_pool)
 */
#ifndef GPE_GPE_H_
#define GPE_GPE_H_

#include "gpe/common.h"
#include "gpe/so.h"
#include "gpe/sequence.h"
#include "gpe/algebraic.h"
#include "gpe/relative.h"
#include "gpe/rope.h"
#include "gpe/bias.h"
#include "gpe/coordinate.h"
#include "gpe/analysis.h"
#include "gpe/inr.h"
#include "gpe/inr_training.h"
#include "gpe/inr_data.h"
#include "gpe/image.h"
#include "gpe/attention.h"
#include "gpe/thread_pool.h"

#endif /* GPE_GPE_H_ */
