/* GroupPE's C ABI: image files (inr/data.h), PNG and JPEG read into and written from
 * DLPack tensors (since 0.5.0). One part of gpe/gpe.h (include that); valid C99 on its
 * own.
 */
#ifndef GPE_IMAGE_H_
#define GPE_IMAGE_H_

#include "gpe/common.h"

#ifdef __cplusplus
extern "C" {
#endif

/* -- Image files --
 * PNG (8- or 16-bit; gray, gray + alpha, RGB, RGBA, palette; alpha dropped) and JPEG
 * (baseline or progressive; gray or colour, CMYK refused), told apart by the file's
 * signature, decoded into values in [0, 1]. A missing, unreadable or corrupt file is
 * GPE_ERROR_INVALID_ARGUMENT with a message naming the path. */
typedef struct gpe_image gpe_image;
/* grayscale != 0 gives one channel (colour to luma: PNG by BT.601 weights on the encoded
 * values, JPEG by libjpeg's Y, the same weights);
 * otherwise three (RGB; gray files expand to equal channels). */
GPE_API GPE_NODISCARD gpe_status gpe_image_read(const char* path, int32_t grayscale,
                                                gpe_image** out);
GPE_API void gpe_image_destroy(gpe_image* image);
/* rows, cols and channels may each be NULL; channels is 1 or 3. */
GPE_API GPE_NODISCARD gpe_status gpe_image_shape(const gpe_image* image, int64_t* rows,
                                                 int64_t* cols, int64_t* channels);
/* out: float32 or float64 [rows, cols, channels], values in [0, 1]. */
GPE_API GPE_NODISCARD gpe_status gpe_image_pixels(const gpe_image* image, DLTensor* out);
/* Writes pixels (float32 or float64 [rows, cols] or [rows, cols, 1 or 3], finite, at most
 * 65536 a side) as an 8-bit PNG, clamping to [lo, hi] (finite, lo < hi) and mapping that
 * range to 0..255 (rounded). An unwritable path is GPE_ERROR_INVALID_ARGUMENT.
 * All or nothing: the image goes to a temporary file of a unique name in path's
 * directory, which is fsync'd and renamed over path only when complete; on any failure
 * (a full disk, a file-size limit) the temporary file is removed, an existing file at
 * path is left whole and GPE_ERROR_INVALID_ARGUMENT is returned. A path that exists and
 * is not a regular file (directory, device, fifo, socket) is refused
 * (GPE_ERROR_INVALID_ARGUMENT) and left alone; a symbolic link is followed and the file
 * it names replaced. A new file gets mode 0666 less the umask; a replaced one keeps its
 * mode. */
GPE_API GPE_NODISCARD gpe_status gpe_image_write_png(const char* path, const DLTensor* pixels,
                                                     double lo, double hi);
/* As gpe_image_write_png, as a baseline JPEG of the given quality (1..100; lossy), at
 * most 65500 pixels a side (JPEG's limit). */
GPE_API GPE_NODISCARD gpe_status gpe_image_write_jpeg(const char* path, const DLTensor* pixels,
                                                      int32_t quality, double lo, double hi);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* GPE_IMAGE_H_ */
